#include "allreduce/compression.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"

namespace ps::allreduce {

absl::StatusOr<Compression> ParseCompression(absl::string_view name) {
  if (name == "none") return Compression::kNone;
  if (name == "fp16") return Compression::kFp16;
  return absl::InvalidArgumentError(
      absl::StrCat("compression \"", name, "\" is not none or fp16"));
}

absl::string_view CompressionName(Compression compression) {
  return compression == Compression::kFp16 ? "fp16" : "none";
}

uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;   // NaN, quiet.
  if (magnitude >= 0x47800000u) return sign | 0x7c00u;  // >= 2^16: inf.
  if (magnitude < 0x38800000u) {
    // Below 2^-14: a subnormal half, value / 2^-24 rounded to an integer.
    // Shifting the full significand keeps the bits that decide the rounding.
    const int exponent = static_cast<int>(magnitude >> 23);
    if (exponent < 102) return sign;  // Below 2^-25: rounds to zero.
    const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    const int shift = 126 - exponent;  // In [14, 24].
    const uint32_t kept = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    const uint32_t rounded =
        kept + ((rest > halfway || (rest == halfway && (kept & 1))) ? 1 : 0);
    return sign | static_cast<uint16_t>(rounded);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits;
  // a carry runs into the exponent, up to infinity, as it should.
  const uint32_t rebiased = magnitude - (112u << 23);
  const uint32_t kept = rebiased >> 13;
  const uint32_t rest = rebiased & 0x1fffu;
  const uint32_t rounded =
      kept + ((rest > 0x1000u || (rest == 0x1000u && (kept & 1))) ? 1 : 0);
  return sign | static_cast<uint16_t>(rounded);
}

float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t significand = half & 0x3ffu;
  uint32_t bits = 0;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (significand << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (significand << 13);
  } else if (significand == 0) {
    bits = sign;
  } else {
    // Subnormal: normalize.
    int e = 113;
    while ((significand & 0x400u) == 0) {
      significand <<= 1;
      --e;
    }
    bits = sign | (static_cast<uint32_t>(e) << 23) |
           ((significand & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

namespace {

// x86's F16C instructions convert 8 values at a time with the same
// rounding (to nearest even; only NaN payloads may differ), so ranks with
// and without them compute the same bits. Elsewhere, the scalar loops.
#if defined(__x86_64__)
bool HasF16c() {
  static const bool has =
      __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return has;
}

__attribute__((target("avx,f16c"))) size_t FloatsToHalvesF16c(const float* in,
                                                              uint16_t* out,
                                                              size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  return i;
}

__attribute__((target("avx,f16c"))) size_t HalvesToFloatsF16c(
    const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i*>(in + i))));
  }
  return i;
}

__attribute__((target("avx,f16c"))) size_t SumHalvesF16c(const uint16_t* a,
                                                         const uint16_t* b,
                                                         uint16_t* out,
                                                         size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 y = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(out + i),
        _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
#endif

}  // namespace

void FloatsToHalves(absl::Span<const float> in, absl::Span<uint16_t> out) {
  size_t i = 0;
#if defined(__x86_64__)
  if (HasF16c()) i = FloatsToHalvesF16c(in.data(), out.data(), in.size());
#endif
  for (; i < in.size(); ++i) out[i] = FloatToHalf(in[i]);
}

void HalvesToFloats(absl::Span<const uint16_t> in, absl::Span<float> out) {
  size_t i = 0;
#if defined(__x86_64__)
  if (HasF16c()) i = HalvesToFloatsF16c(in.data(), out.data(), in.size());
#endif
  for (; i < in.size(); ++i) out[i] = HalfToFloat(in[i]);
}

void SumHalvesInFloat(const uint16_t* a, const uint16_t* b, uint16_t* out,
                      size_t n) {
  size_t i = 0;
#if defined(__x86_64__)
  if (HasF16c()) i = SumHalvesF16c(a, b, out, n);
#endif
  for (; i < n; ++i)
    out[i] = FloatToHalf(HalfToFloat(a[i]) + HalfToFloat(b[i]));
}

double Fp16SumBound(double abs_sum, int num_ranks) {
  const double u = 0x1p-11 + 0x1p-24;
  const double k = 2.0 * num_ranks;
  return k * u / (1 - k * u) * abs_sum + k * 0x1p-25;
}

}  // namespace ps::allreduce
