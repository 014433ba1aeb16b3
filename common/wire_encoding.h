#ifndef PS_COMMON_WIRE_ENCODING_H_
#define PS_COMMON_WIRE_ENCODING_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

// The one home for the compressed ways float32 tensor values travel
// (ps.proto Encoding says the format; this is its only encoder and
// decoder). Servers keep float32: pushed chunks are decoded to float32 as
// they arrive, pulled weights are encoded as they leave. Every format is
// little-endian and carries no header (the chunk message says the encoding,
// range and element count).

// Numbered as ps.proto Encoding (checked where the proto is mapped).
enum class WireEncoding : int {
  kFloat32 = 0,
  // The upper half of binary32, rounded to nearest, ties to even: float32's
  // range (denormals included), 8 significant bits.
  kBfloat16 = 1,
  // IEEE binary16, rounded to nearest, ties to even: magnitudes from about
  // 6e-8 (smaller become 0) to 65504 (larger become infinite), 11
  // significant bits.
  kFloat16 = 2,
  // Sparse: (uint32 index, binary32 value) pairs, indices strictly
  // increasing; elements not listed are 0.
  kTopK = 3,
};

// "float32", "bfloat16", "float16", "top_k".
absl::string_view WireEncodingName(WireEncoding encoding);

// The encoding numbered `number` (a proto enum's value), or InvalidArgument
// naming the number.
absl::StatusOr<WireEncoding> WireEncodingFromNumber(int number);

// One value, rounded to nearest, ties to even. NaN stays NaN (quiet, sign
// kept), infinities stay infinite.
uint16_t FloatToBfloat16(float value);
float Bfloat16ToFloat(uint16_t bits);
uint16_t FloatToFloat16(float value);
float Float16ToFloat(uint16_t bits);

// kFloat16 scales a chunk's values by a power of two first (ps.proto
// TensorChunk.scale_exponent), at most this one either way.
inline constexpr int kMaxScaleExponent = 100;

// The scale exponent e for kFloat16 values: the largest finite magnitude
// times 2^e lies in [2^14, 2^15) (clamped to +-kMaxScaleExponent); 0 when
// there is no finite value other than 0.
int Float16ScaleExponent(absl::Span<const float> values);

// The value `value` becomes after encoding and decoding it (for a dense
// encoding; kTopK and kFloat32 keep it).
float RoundTrip(WireEncoding encoding, float value);

// Appends the encoding of `values` to `out`. kTopK writes the elements that
// are not zero (a sparsified gradient: the worker chose them), with indices
// counted from values[0]. kFloat16 writes each value times
// 2^scale_exponent (which the other encodings ignore).
void AppendEncoded(WireEncoding encoding, absl::Span<const float> values,
                   std::string* out, int scale_exponent = 0);

// A chunk of values as the wire carries it.
struct EncodedChunk {
  std::string bytes;
  int scale_exponent = 0;  // ps.proto TensorChunk.scale_exponent.
};

// AppendEncoded of `values` alone, kFloat16 at Float16ScaleExponent's
// scale: what a writer of a chunk sends.
EncodedChunk EncodeChunk(WireEncoding encoding, absl::Span<const float> values);

// Decodes `bytes` into `out` (the chunk's out.size() elements; kTopK sets
// the elements not listed to 0). InvalidArgument saying what is wrong for
// bytes that are not a valid encoding of out.size() elements: a length
// other than the encoding's, a top-k index at or past out.size(), or one
// not above the previous (out of order or repeated), a scale exponent
// other than 0 but for kFloat16 or beyond kMaxScaleExponent. `out` is
// unspecified after a failure.
absl::Status DecodeEncoded(WireEncoding encoding, const absl::Cord& bytes,
                           absl::Span<float> out, int scale_exponent = 0);

}  // namespace ps

#endif  // PS_COMMON_WIRE_ENCODING_H_
