#include "common/initializer.h"

#include <algorithm>
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

// Standard normal by Box-Muller from the two 32-bit halves of `bits`; the
// first uniform is in (0, 1], so the logarithm is finite.
double StandardNormal(uint64_t bits) {
  constexpr double kTwoPi = 6.283185307179586;
  const double u1 = (static_cast<double>(bits >> 32) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(bits & 0xffffffffULL) / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

}  // namespace

void InitializeSlice(const ModelSpec& model, uint32_t tensor_id,
                     uint64_t offset, absl::Span<float> out) {
  using Kind = InitializerSpec::Kind;
  const InitializerSpec& init = model.tensors[tensor_id].initializer;
  const uint64_t stream = Mix(model.seed ^ Mix(tensor_id + 1));
  switch (init.kind) {
    case Kind::kZeros:
    case Kind::kFromRank0:
      std::fill(out.begin(), out.end(), 0.0f);
      return;
    case Kind::kConstant:
      std::fill(out.begin(), out.end(), static_cast<float>(init.value));
      return;
    case Kind::kUniform: {
      const double half = 0.5 * (init.high - init.low);
      const double mid = init.low + half;
      for (size_t i = 0; i < out.size(); ++i) {
        // UnitUniform is in [-1, 1); rounding to float may still reach
        // `high`, which is clamped back below it.
        const float v = static_cast<float>(
            mid + half * UnitUniform(Mix(stream ^ (offset + i))));
        out[i] = std::min(
            v, std::nextafter(static_cast<float>(init.high), -INFINITY));
      }
      return;
    }
    case Kind::kNormal:
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<float>(
            init.mean +
            init.stddev * StandardNormal(Mix(stream ^ (offset + i))));
      }
      return;
    case Kind::kGlorotUniform: {
      const float limit = std::sqrt(6.0f / static_cast<float>(std::max<int64_t>(
                                               1, init.fan_in + init.fan_out)));
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = limit * UnitUniform(Mix(stream ^ (offset + i)));
      }
      return;
    }
  }
}

}  // namespace ps
