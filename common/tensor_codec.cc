#include "common/tensor_codec.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// Encode and decode are one memcpy each where the encoding is the memory
// image; elsewhere each element is byte-swapped.
uint32_t ByteSwap(uint32_t v) { return __builtin_bswap32(v); }

absl::string_view BytesOf(absl::Span<const float> values) {
  return absl::string_view(reinterpret_cast<const char*>(values.data()),
                           values.size() * sizeof(float));
}

void CopyEncoded(const float* src, size_t n, char* dst) {
  if (kFloatEncodingIsMemoryImage) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &src[i], 4);
    bits = ByteSwap(bits);
    std::memcpy(dst + 4 * i, &bits, 4);
  }
}

absl::Status CheckDecodedSize(size_t bytes, size_t elements) {
  if (bytes != elements * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor data has ", bytes, " bytes, expected ",
        elements * sizeof(float), " (", elements, " float32 elements)"));
  }
  return absl::OkStatus();
}

}  // namespace

void AppendFloats(absl::Span<const float> values, std::string* out) {
  if (kFloatEncodingIsMemoryImage) {
    // One copy: resize() would zero-fill first (a few % of a shard's CPU).
    const absl::string_view bytes = BytesOf(values);
    out->append(bytes.data(), bytes.size());
    return;
  }
  const size_t old_size = out->size();
  out->resize(old_size + values.size() * sizeof(float));
  CopyEncoded(values.data(), values.size(), out->data() + old_size);
}

void EncodeFloats(absl::Span<const float> values, std::string* out) {
  out->clear();
  AppendFloats(values, out);
}

absl::Status DecodeFloats(absl::string_view bytes, absl::Span<float> out) {
  if (absl::Status s = CheckDecodedSize(bytes.size(), out.size()); !s.ok()) {
    return s;
  }
  if (kFloatEncodingIsMemoryImage) {
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return absl::OkStatus();
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, bytes.data() + 4 * i, 4);
    bits = ByteSwap(bits);
    std::memcpy(&out[i], &bits, 4);
  }
  return absl::OkStatus();
}

absl::Status DecodeFloats(const absl::Cord& bytes, absl::Span<float> out) {
  if (absl::Status s = CheckDecodedSize(bytes.size(), out.size()); !s.ok()) {
    return s;
  }
  return DecodeFloatsAt(bytes, 0, out);
}

absl::Status DecodeFloatsAt(const absl::Cord& bytes, uint64_t first,
                            absl::Span<float> out) {
  const uint64_t elements = bytes.size() / sizeof(float);
  if (first > elements || out.size() > elements - first) {
    return absl::OutOfRangeError(absl::StrCat(
        "elements [", first, ", ", first + out.size(),
        ") are not all in tensor data of ", bytes.size(), " bytes"));
  }
  uint64_t skip = first * sizeof(float);
  size_t left = out.size() * sizeof(float);
  if (!kFloatEncodingIsMemoryImage) {
    // An element may straddle two pieces; flatten, then swap.
    return DecodeFloats(std::string(bytes.Subcord(skip, left)), out);
  }
  char* dst = reinterpret_cast<char*>(out.data());
  for (absl::string_view piece : bytes.Chunks()) {
    if (left == 0) break;
    if (skip >= piece.size()) {
      skip -= piece.size();
      continue;
    }
    const size_t n = std::min<size_t>(piece.size() - skip, left);
    std::memcpy(dst, piece.data() + skip, n);
    dst += n;
    left -= n;
    skip = 0;
  }
  return absl::OkStatus();
}

EncodedFloats EncodeInto(absl::Span<const float> values, absl::Span<char> out) {
  assert(out.size() >= values.size() * sizeof(float));
  CopyEncoded(values.data(), values.size(), out.data());
  return EncodedFloats(
      absl::string_view(out.data(), values.size() * sizeof(float)));
}

EncodedFloats EncodedView(absl::Span<const float> values,
                          absl::Span<char> scratch) {
  if (kFloatEncodingIsMemoryImage) return EncodedFloats(BytesOf(values));
  return EncodeInto(values, scratch);
}

}  // namespace ps
