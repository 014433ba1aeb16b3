#include "common/tensor_codec.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// On a little-endian host the encoding is the memory image, so encode and
// decode are one memcpy each; elsewhere each element is byte-swapped.
#if defined(ABSL_IS_LITTLE_ENDIAN)
constexpr bool kHostIsLittleEndian = true;
#else
constexpr bool kHostIsLittleEndian = false;
#endif

uint32_t ByteSwap(uint32_t v) { return __builtin_bswap32(v); }

void CopyEncoded(const float* src, size_t n, char* dst) {
  if (kHostIsLittleEndian) {
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

}  // namespace

void AppendFloats(absl::Span<const float> values, std::string* out) {
  if (kHostIsLittleEndian) {
    // One copy: resize() would zero-fill first (a few % of a shard's CPU).
    out->append(reinterpret_cast<const char*>(values.data()),
                values.size() * sizeof(float));
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
  if (bytes.size() != out.size() * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor data has ", bytes.size(), " bytes, expected ",
        out.size() * sizeof(float), " (", out.size(), " float32 elements)"));
  }
  if (kHostIsLittleEndian) {
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

}  // namespace ps
