#ifndef PS_COMMON_TENSOR_CODEC_H_
#define PS_COMMON_TENSOR_CODEC_H_

#include <cstdint>
#include <cstring>
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

// The index of the first element of `bytes` (whole encoded elements) that is
// NaN or infinite, or bytes.size() / 4 when every one is finite. Reads the
// pieces in place; an element split between two pieces is put together.
uint64_t FirstNonFinite(const absl::Cord& bytes);

// Encoded values read where they lie, at any alignment: element i is
// decoded as it is read, so an update can take a gradient straight from the
// network buffers it arrived in instead of from a decoded copy. Where the
// encoding is the memory image a read is one unaligned load, and a loop of
// reads vectorizes as one over a float array does. Does not own the bytes.
class EncodedFloats {
 public:
  EncodedFloats() = default;
  // `bytes` must hold whole elements.
  explicit EncodedFloats(absl::string_view bytes)
      : data_(bytes.data()), size_(bytes.size() / sizeof(float)) {}

  size_t size() const { return size_; }

  float operator[](size_t i) const {
    uint32_t bits;
    std::memcpy(&bits, data_ + i * sizeof(float), sizeof(bits));
    if (!kFloatEncodingIsMemoryImage) bits = __builtin_bswap32(bits);
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// Encodes `values` into `out` (at least values.size() * 4 bytes) and
// returns the encoded view of them there.
EncodedFloats EncodeInto(absl::Span<const float> values, absl::Span<char> out);

// `values` as encoded values: their own memory where it is the encoding (no
// copy), else encoded into `scratch` as EncodeInto does.
EncodedFloats EncodedView(absl::Span<const float> values,
                          absl::Span<char> scratch);

}  // namespace ps

#endif  // PS_COMMON_TENSOR_CODEC_H_
