#include "common/wire_encoding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/tensor_codec.h"

namespace ps {
namespace {

uint32_t BitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FloatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// All ones if `condition`, else 0: selects without branches.
uint32_t Mask(bool condition) { return 0u - static_cast<uint32_t>(condition); }

void PutU16(uint16_t v, char* out) {
  if (kFloatEncodingIsMemoryImage) {  // A little-endian host.
    std::memcpy(out, &v, sizeof(v));
    return;
  }
  out[0] = static_cast<char>(v & 0xff);
  out[1] = static_cast<char>(v >> 8);
}

uint16_t GetU16(const char* in) {
  if (kFloatEncodingIsMemoryImage) {
    uint16_t v;
    std::memcpy(&v, in, sizeof(v));
    return v;
  }
  return static_cast<uint16_t>(static_cast<uint8_t>(in[0]) |
                               static_cast<uint8_t>(in[1]) << 8);
}

void PutU32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (8 * i));
}

uint32_t GetU32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  }
  return v;
}

// The bodies of the public conversions, inline for the loops: under -fPIC
// a call to an exported function stays a call, and a loop of calls does not
// vectorize.
inline uint16_t ToBfloat16(float value) {
  const uint32_t bits = BitsOf(value);
  // Adding half an ulp minus one, plus the kept part's lowest bit, carries
  // into the kept half exactly when nearest-even rounding goes up (and
  // overflows to infinity where it should).
  const uint32_t rounded = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16;
  // Truncation could clear every mantissa bit a NaN has left: it is kept a
  // quiet NaN. A select, not a branch, so that loops of it vectorize.
  const uint32_t nan = (bits >> 16) | 0x0040;
  return static_cast<uint16_t>((bits & 0x7fffffff) > 0x7f800000 ? nan
                                                                : rounded);
}

inline float FromBfloat16(uint16_t bits) {
  return FloatOf(static_cast<uint32_t>(bits) << 16);
}

// FloatToFloat16's body.
inline uint16_t ToFloat16(float value) {
  const uint32_t bits = BitsOf(value);
  const uint32_t sign = (bits >> 16) & 0x8000;
  const uint32_t magnitude = bits & 0x7fffffff;
  // Each case's result is computed and the right one masked in, without
  // branches, so that loops of this vectorize; a case's arithmetic on
  // another case's input is meaningless but harmless (no traps).
  //
  // Normal: rebias the exponent (127 -> 15) and round away the 13 lowest
  // mantissa bits as FloatToBfloat16 does its 16.
  const uint32_t odd = (magnitude >> 13) & 1;
  const uint32_t normal =
      (magnitude - (uint32_t{127 - 15} << 23) + 0x0fff + odd) >> 13;
  // Below 2^-14, binary16 is subnormal: multiples of 2^-24. Adding 0.5
  // (whose ulp is 2^-24) rounds to one of them, to nearest even, in the
  // hardware's default rounding; what is added to 0.5's bits is the
  // result's bits (2^-14 itself comes out as the smallest normal).
  const uint32_t subnormal = BitsOf(FloatOf(magnitude) + 0.5f) - BitsOf(0.5f);
  // Infinity stays infinite, NaN stays NaN (kept quiet, payload's top bits
  // kept); 65520 and above round to infinity (65504 is the largest).
  const uint32_t nan_bits = 0x0200 | ((magnitude >> 13) & 0x3ff);
  const uint32_t infinite = 0x7c00 | (nan_bits & Mask(magnitude > 0x7f800000));
  const uint32_t is_infinite = Mask(magnitude >= 0x477ff000);
  const uint32_t is_subnormal = Mask(magnitude < 0x38800000);
  const uint32_t finite = (subnormal & is_subnormal) | (normal & ~is_subnormal);
  return static_cast<uint16_t>(sign | (infinite & is_infinite) |
                               (finite & ~is_infinite));
}

// FloatToFloat16 of each of `count` values times `scale`, to `out`.
void EncodeFloat16Run(const float* __restrict in, size_t count, float scale,
                      char* __restrict out) {
  for (size_t i = 0; i < count; ++i) {
    PutU16(ToFloat16(in[i] * scale), out + 2 * i);
  }
}

// The bytes of `cord` in one piece: its own memory when flat, else copied
// into `scratch`.
absl::string_view Contiguous(const absl::Cord& cord, std::string* scratch) {
  if (auto flat = cord.TryFlat(); flat.has_value()) return *flat;
  absl::CopyCordToString(cord, scratch);
  return *scratch;
}

absl::Status WrongLength(WireEncoding encoding, size_t got, size_t n,
                         absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(WireEncodingName(encoding), " data of ", n,
                   " elements carries ", got, " bytes, expected ", expected));
}

// Decodes `count` 2-byte values at `in` to `out`. Loops of their own, on
// pointers that do not alias, without calls: they vectorize.
void DecodeBfloat16Run(const char* in, size_t count, float* __restrict out) {
  for (size_t i = 0; i < count; ++i) out[i] = FromBfloat16(GetU16(in + 2 * i));
}

// Float16ToFloat without branches, times `unscale`: each case's bits are
// computed and the right ones masked in. Subnormals go through an integer
// conversion, not a denormal float32, so that they stay exact where
// denormals are flushed (torch.set_flush_denormal).
void DecodeFloat16Run(const char* in, size_t count, float unscale,
                      float* __restrict out) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t h = GetU16(in + 2 * i);
    const uint32_t sign = (h & 0x8000) << 16;
    const uint32_t magnitude = h & 0x7fff;
    const uint32_t normal = (magnitude << 13) + (uint32_t{127 - 15} << 23);
    // Zero or subnormal: mantissa x 2^-24, exact.
    const uint32_t subnormal =
        BitsOf(static_cast<float>(static_cast<int32_t>(magnitude)) * 0x1p-24f);
    const uint32_t special = 0x7f800000 | (magnitude & 0x3ff) << 13;
    const uint32_t is_subnormal = Mask(magnitude < 0x0400);
    const uint32_t is_special = Mask(magnitude >= 0x7c00);
    const uint32_t finite =
        (is_subnormal & subnormal) | (~is_subnormal & normal);
    const uint32_t bits = (is_special & special) | (~is_special & finite);
    out[i] = FloatOf(sign | bits) * unscale;
  }
}

// Calls decode(in, count, out) over the 2-byte values of `bytes` piece by
// piece, without flattening the cord; a value split between two pieces
// goes through `pair`.
template <typename Decode>
void DecodePieces(const absl::Cord& bytes, float* out, Decode decode) {
  char pair[2];
  bool half = false;
  for (absl::string_view piece : bytes.Chunks()) {
    if (half && !piece.empty()) {
      pair[1] = piece[0];
      decode(pair, 1, out++);
      piece.remove_prefix(1);
      half = false;
    }
    const size_t count = piece.size() / 2;
    decode(piece.data(), count, out);
    out += count;
    if (piece.size() % 2 == 1) {
      pair[0] = piece.back();
      half = true;
    }
  }
}

}  // namespace

absl::string_view WireEncodingName(WireEncoding encoding) {
  switch (encoding) {
    case WireEncoding::kFloat32:
      return "float32";
    case WireEncoding::kBfloat16:
      return "bfloat16";
    case WireEncoding::kFloat16:
      return "float16";
    case WireEncoding::kTopK:
      return "top_k";
  }
  return "unknown";
}

absl::StatusOr<WireEncoding> WireEncodingFromNumber(int number) {
  switch (number) {
    case static_cast<int>(WireEncoding::kFloat32):
    case static_cast<int>(WireEncoding::kBfloat16):
    case static_cast<int>(WireEncoding::kFloat16):
    case static_cast<int>(WireEncoding::kTopK):
      return static_cast<WireEncoding>(number);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown encoding ", number,
                   " (known: 0 float32, 1 bfloat16, 2 float16, 3 top_k)"));
}

uint16_t FloatToBfloat16(float value) { return ToBfloat16(value); }
float Bfloat16ToFloat(uint16_t bits) { return FromBfloat16(bits); }
uint16_t FloatToFloat16(float value) { return ToFloat16(value); }

float Float16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {  // Zero or subnormal: mantissa * 2^-24, exact.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return FloatOf(sign | BitsOf(magnitude));
  }
  if (exponent == 0x1f) return FloatOf(sign | 0x7f800000 | (mantissa << 13));
  return FloatOf(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

int Float16ScaleExponent(absl::Span<const float> values) {
  // On the magnitudes' bits, which order as the magnitudes do: an integer
  // maximum vectorizes where a float one does not.
  int32_t largest = 0;
  for (float v : values) {
    const int32_t m = static_cast<int32_t>(BitsOf(v) & 0x7fffffff);
    largest = std::max(largest, m < 0x7f800000 ? m : 0);
  }
  if (largest == 0) return 0;
  return std::clamp(14 - std::ilogb(FloatOf(largest)), -kMaxScaleExponent,
                    kMaxScaleExponent);
}

float RoundTrip(WireEncoding encoding, float value) {
  switch (encoding) {
    case WireEncoding::kBfloat16:
      return Bfloat16ToFloat(FloatToBfloat16(value));
    case WireEncoding::kFloat16:
      return Float16ToFloat(FloatToFloat16(value));
    case WireEncoding::kFloat32:
    case WireEncoding::kTopK:
      break;
  }
  return value;
}

void AppendEncoded(WireEncoding encoding, absl::Span<const float> values,
                   std::string* out, int scale_exponent) {
  switch (encoding) {
    case WireEncoding::kFloat32:
      AppendFloats(values, out);
      return;
    case WireEncoding::kBfloat16:
    case WireEncoding::kFloat16: {
      const size_t start = out->size();
      out->resize(start + 2 * values.size());
      char* p = out->data() + start;
      // One loop per encoding, without calls: they vectorize.
      if (encoding == WireEncoding::kBfloat16) {
        for (size_t i = 0; i < values.size(); ++i) {
          PutU16(ToBfloat16(values[i]), p + 2 * i);
        }
      } else {
        // A power of two: exact, bar overflow, which the exponent avoids.
        EncodeFloat16Run(values.data(), values.size(),
                         std::ldexp(1.0f, scale_exponent), p);
      }
      return;
    }
    case WireEncoding::kTopK: {
      char pair[8];
      for (size_t i = 0; i < values.size(); ++i) {
        if (values[i] == 0) continue;
        PutU32(static_cast<uint32_t>(i), pair);
        PutU32(BitsOf(values[i]), pair + 4);
        out->append(pair, sizeof(pair));
      }
      return;
    }
  }
}

EncodedChunk EncodeChunk(WireEncoding encoding,
                         absl::Span<const float> values) {
  EncodedChunk chunk;
  if (encoding == WireEncoding::kFloat16) {
    chunk.scale_exponent = Float16ScaleExponent(values);
  }
  AppendEncoded(encoding, values, &chunk.bytes, chunk.scale_exponent);
  return chunk;
}

absl::Status DecodeEncoded(WireEncoding encoding, const absl::Cord& bytes,
                           absl::Span<float> out, int scale_exponent) {
  const size_t n = out.size();
  if (scale_exponent != 0 && (encoding != WireEncoding::kFloat16 ||
                              scale_exponent > kMaxScaleExponent ||
                              scale_exponent < -kMaxScaleExponent)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scale exponent ", scale_exponent, " with ", WireEncodingName(encoding),
        " data (float16 only, within +-", kMaxScaleExponent, ")"));
  }
  switch (encoding) {
    case WireEncoding::kFloat32:
      if (bytes.size() != 4 * n) {
        return WrongLength(encoding, bytes.size(), n, absl::StrCat(4 * n));
      }
      return DecodeFloats(bytes, out);
    case WireEncoding::kBfloat16:
    case WireEncoding::kFloat16: {
      if (bytes.size() != 2 * n) {
        return WrongLength(encoding, bytes.size(), n, absl::StrCat(2 * n));
      }
      if (encoding == WireEncoding::kBfloat16) {
        DecodePieces(bytes, out.data(), DecodeBfloat16Run);
      } else {
        const float unscale = std::ldexp(1.0f, -scale_exponent);
        DecodePieces(bytes, out.data(),
                     [unscale](const char* in, size_t count, float* to) {
                       DecodeFloat16Run(in, count, unscale, to);
                     });
      }
      return absl::OkStatus();
    }
    case WireEncoding::kTopK: {
      if (bytes.size() % 8 != 0 || bytes.size() / 8 > n) {
        return WrongLength(encoding, bytes.size(), n,
                           absl::StrCat("a multiple of 8 up to ", 8 * n));
      }
      std::string scratch;
      const char* p = Contiguous(bytes, &scratch).data();
      std::fill(out.begin(), out.end(), 0.0f);
      const size_t k = bytes.size() / 8;
      for (size_t j = 0; j < k; ++j) {
        const uint32_t index = GetU32(p + 8 * j);
        if (index >= n) {
          return absl::InvalidArgumentError(
              absl::StrCat("top_k pair ", j, " has index ", index,
                           ", not below the chunk's ", n, " elements"));
        }
        if (j > 0 && index <= GetU32(p + 8 * (j - 1))) {
          return absl::InvalidArgumentError(absl::StrCat(
              "top_k pair ", j, " has index ", index,
              ", not above the previous pair's (indices strictly increase)"));
        }
        out[index] = FloatOf(GetU32(p + 8 * j + 4));
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown encoding ", static_cast<int>(encoding)));
}

}  // namespace ps
