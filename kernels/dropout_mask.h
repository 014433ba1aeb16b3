#ifndef PS_KERNELS_DROPOUT_MASK_H_
#define PS_KERNELS_DROPOUT_MASK_H_

// The dropout mask as a pure function of (seed, step, element index), shared
// by the CPU backend, the CUDA kernels (nvcc compiles this header too) and the
// reference: one definition, so every backend drops the same elements.
// Counter-based (no generator state), so any element's verdict is computed
// on its own, in any order, by any thread.

#include <cstdint>

#ifdef __CUDACC__
#define PS_HOST_DEVICE __host__ __device__
#else
#define PS_HOST_DEVICE
#endif

namespace ps::kernels::dropout {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// SplitMix64's output function: a bijection whose every output bit depends
// on every input bit.
PS_HOST_DEVICE inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The key of one step: steps and seeds never share a stream by accident.
PS_HOST_DEVICE inline uint64_t StepKey(uint64_t seed, uint64_t step) {
  return Mix64(seed ^ Mix64(step + kGolden));
}

// 24 uniform bits for element `index`: the index-th output of SplitMix64
// started at `key`.
PS_HOST_DEVICE inline uint32_t Bits24(uint64_t key, uint64_t index) {
  return static_cast<uint32_t>(Mix64(key + (index + 1) * kGolden) >> 40);
}

// Elements whose bits are below this are dropped: rate * 2^24, rounded down,
// for a rate in [0, 1).
inline uint32_t DropThreshold(float rate) {
  return static_cast<uint32_t>(static_cast<double>(rate) * 16777216.0);
}

// The factor kept elements are multiplied by, in float on every backend.
inline float KeepScale(float rate) { return 1.0f / (1.0f - rate); }

PS_HOST_DEVICE inline bool Kept(uint64_t key, uint64_t index,
                                uint32_t threshold) {
  return Bits24(key, index) >= threshold;
}

}  // namespace ps::kernels::dropout

#endif  // PS_KERNELS_DROPOUT_MASK_H_
