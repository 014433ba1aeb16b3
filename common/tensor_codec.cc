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

namespace {

// Whether the encoded element `bits` is NaN or infinite: its exponent is all
// ones. A test on bits, so that a loop of them vectorizes.
bool NonFiniteBits(uint32_t bits) {
  if (!kFloatEncodingIsMemoryImage) bits = ByteSwap(bits);
  return (bits & 0x7f800000u) == 0x7f800000u;
}

// Whether any of `n` whole elements at `data` is non-finite. No early exit,
// so that it vectorizes; compiled for AVX2 too, picked at load time.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx2", "default")))
#endif
bool AnyNonFinite(const char* data, uint64_t n) {
  uint32_t any = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i * sizeof(bits), sizeof(bits));
    any |= NonFiniteBits(bits);
  }
  return any != 0;
}

// The first non-finite element of `n` whole elements at `data`, or n.
uint64_t FirstNonFiniteIn(const char* data, uint64_t n) {
  // Most gradients are finite: the exact position is rarely looked for.
  constexpr uint64_t kBlock = 4096;
  for (uint64_t begin = 0; begin < n; begin += kBlock) {
    const uint64_t end = std::min(n, begin + kBlock);
    if (!AnyNonFinite(data + begin * sizeof(float), end - begin)) continue;
    for (uint64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, data + i * sizeof(bits), sizeof(bits));
      if (NonFiniteBits(bits)) return i;
    }
  }
  return n;
}

}  // namespace

uint64_t FirstNonFinite(const absl::Cord& bytes) {
  const uint64_t total = bytes.size() / sizeof(float);
  uint64_t element = 0;  // Elements before the current piece's first whole one.
  char split[sizeof(float)];
  size_t split_bytes = 0;  // Of an element begun in the previous piece.
  for (absl::string_view piece : bytes.Chunks()) {
    if (split_bytes > 0) {
      const size_t take = std::min(sizeof(float) - split_bytes, piece.size());
      std::memcpy(split + split_bytes, piece.data(), take);
      split_bytes += take;
      piece.remove_prefix(take);
      if (split_bytes < sizeof(float)) continue;
      uint32_t bits;
      std::memcpy(&bits, split, sizeof(bits));
      if (NonFiniteBits(bits)) return element;
      ++element;
      split_bytes = 0;
    }
    const uint64_t whole = piece.size() / sizeof(float);
    const uint64_t bad = FirstNonFiniteIn(piece.data(), whole);
    if (bad < whole) return element + bad;
    element += whole;
    split_bytes = piece.size() % sizeof(float);
    std::memcpy(split, piece.data() + whole * sizeof(float), split_bytes);
  }
  return total;
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
