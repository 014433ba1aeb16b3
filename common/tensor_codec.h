#ifndef PS_COMMON_TENSOR_CODEC_H_
#define PS_COMMON_TENSOR_CODEC_H_

#include <string>

#include "absl/base/config.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

// The one home for how float32 tensors become bytes: little-endian IEEE-754,
// four bytes an element, no header (the framing message carries dtype, shape
// and range). Used for the wire and for checkpoints alike.

// On a little-endian host the encoding is the memory image of the floats, so
// tensor bytes can go to the wire from, and come from it into, float memory.
#if defined(ABSL_IS_LITTLE_ENDIAN)
inline constexpr bool kFloatEncodingIsMemoryImage = true;
#else
inline constexpr bool kFloatEncodingIsMemoryImage = false;
#endif

// Appends the encoding of `values` to `out`.
void AppendFloats(absl::Span<const float> values, std::string* out);

// Replaces `out` with the encoding of `values`.
void EncodeFloats(absl::Span<const float> values, std::string* out);

// Decodes `bytes` into `out`; fails, leaving `out` untouched, unless `bytes`
// holds exactly out.size() elements.
absl::Status DecodeFloats(absl::string_view bytes, absl::Span<float> out);

// The same for bytes in pieces (as received from the network): one copy,
// piece by piece, into `out`.
absl::Status DecodeFloats(const absl::Cord& bytes, absl::Span<float> out);

// Decodes elements [first, first + out.size()) of `bytes` into `out`, for
// reading a received chunk a block at a time. Fails, leaving `out`
// untouched, unless `bytes` holds them.
absl::Status DecodeFloatsAt(const absl::Cord& bytes, uint64_t first,
                            absl::Span<float> out);

}  // namespace ps

#endif  // PS_COMMON_TENSOR_CODEC_H_
