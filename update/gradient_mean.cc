#include "update/gradient_mean.h"

namespace ps::update {

// Both loops are bound by memory traffic: AVX2's wider loads move it
// faster, and neither uses FMA, so both clones give the same bits.
#if defined(__x86_64__) && defined(__GNUC__)
#define PS_MEAN_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define PS_MEAN_LOOP
#endif

PS_MEAN_LOOP void AddWeighted(EncodedFloats g, double weight, double* sum) {
  const size_t n = g.size();
  for (size_t i = 0; i < n; ++i) sum[i] += weight * g[i];
}

PS_MEAN_LOOP void DivideToFloats(const double* sum, size_t n, double total,
                                 float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(sum[i] / total);
}

#undef PS_MEAN_LOOP

}  // namespace ps::update
