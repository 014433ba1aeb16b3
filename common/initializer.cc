#include "common/initializer.h"

#include <cmath>
#include <cstdint>

namespace ps {
namespace {

// SplitMix64's finalizer: a counter-based generator, so any element can be
// drawn without drawing the ones before it.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) from the top 24 bits, exactly representable in float.
float UnitUniform(uint64_t bits) {
  return static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

}  // namespace

void InitializeSlice(const ModelSpec& model, uint32_t tensor_id,
                     uint64_t offset, uint64_t seed, absl::Span<float> out) {
  const TensorSpec& spec = model.tensors[tensor_id];
  if (spec.is_bias) {
    for (float& v : out) v = 0.0f;
    return;
  }
  const float limit = std::sqrt(6.0f / static_cast<float>(std::max<int64_t>(
                                           1, spec.fan_in + spec.fan_out)));
  const uint64_t stream = Mix(seed ^ Mix(tensor_id + 1));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = limit * UnitUniform(Mix(stream ^ (offset + i)));
  }
}

}  // namespace ps
