#include "server/slice_gradient.h"

#include <algorithm>
#include <cassert>
#include <iterator>
#include <string>
#include <utility>

#include "common/tensor_codec.h"

namespace ps::server {

SliceGradient SliceGradient::FromFloats(absl::Span<const float> values) {
  std::string bytes;
  EncodeFloats(values, &bytes);
  SliceGradient gradient;
  gradient.Add(0, absl::Cord(std::move(bytes)));
  return gradient;
}

void SliceGradient::Add(uint64_t begin, absl::Cord bytes) {
  Chunk chunk{begin, bytes.size() / sizeof(float), std::move(bytes)};
  num_elements_ += chunk.size;
  // Workers send a slice's chunks in order, so this is an append.
  chunks_.insert(FirstChunkAfter(begin), std::move(chunk));
}

std::vector<SliceGradient::Chunk>::const_iterator
SliceGradient::FirstChunkAfter(uint64_t element) const {
  return std::upper_bound(
      chunks_.begin(), chunks_.end(), element,
      [](uint64_t e, const Chunk& c) { return e < c.begin; });
}

void SliceGradient::Read(uint64_t begin, absl::Span<float> out) const {
  // The chunk holding `begin` is the one before.
  auto chunk = FirstChunkAfter(begin);
  while (!out.empty()) {
    assert(chunk != chunks_.begin());  // Read's precondition: all added.
    const Chunk& c = *std::prev(chunk);
    const uint64_t first = begin - c.begin;
    assert(first < c.size);
    const size_t n = std::min<uint64_t>(out.size(), c.size - first);
    // In range by construction: the chunk holds `c.size` elements.
    const absl::Status decoded = DecodeFloatsAt(c.bytes, first, out.first(n));
    assert(decoded.ok());
    (void)decoded;
    out.remove_prefix(n);
    begin += n;
    ++chunk;
  }
}

}  // namespace ps::server
