#include "server/slice_gradient.h"

#include <algorithm>
#include <cassert>
#include <iterator>
#include <memory>
#include <string>
#include <utility>

namespace ps::server {

SliceGradient SliceGradient::FromFloats(absl::Span<const float> values) {
  std::string bytes;
  EncodeFloats(values, &bytes);
  SliceGradient gradient;
  gradient.Add(0, absl::Cord(std::move(bytes)));
  return gradient;
}

void SliceGradient::Add(uint64_t begin, absl::Cord bytes) {
  auto chunk = std::make_shared<Chunk>();
  chunk->begin = begin;
  chunk->size = bytes.size() / sizeof(float);
  chunk->bytes = std::move(bytes);
  uint64_t offset = 0;
  for (absl::string_view piece : chunk->bytes.Chunks()) {
    if (piece.empty()) continue;
    chunk->pieces.push_back({offset, piece});
    offset += piece.size();
  }
  num_elements_ += chunk->size;
  // Workers send a slice's chunks in order, so this is an append.
  chunks_.insert(FirstChunkAfter(begin), std::move(chunk));
}

SliceGradient::ChunkList::const_iterator SliceGradient::FirstChunkAfter(
    uint64_t element) const {
  return std::upper_bound(
      chunks_.begin(), chunks_.end(), element,
      [](uint64_t e, const std::shared_ptr<const Chunk>& c) {
        return e < c->begin;
      });
}

const SliceGradient::Chunk& SliceGradient::ChunkHolding(
    uint64_t element) const {
  auto after = FirstChunkAfter(element);
  assert(after != chunks_.begin());  // The callers' precondition.
  const Chunk& chunk = **std::prev(after);
  assert(element - chunk.begin < chunk.size);
  return chunk;
}

EncodedFloats SliceGradient::View(uint64_t begin, size_t max_elements,
                                  absl::Span<char> scratch) const {
  assert(max_elements >= 1 && scratch.size() >= sizeof(float));
  const Chunk& chunk = ChunkHolding(begin);
  const uint64_t first_byte = (begin - chunk.begin) * sizeof(float);
  auto piece = std::prev(std::upper_bound(
      chunk.pieces.begin(), chunk.pieces.end(), first_byte,
      [](uint64_t b, const Piece& p) { return b < p.offset; }));
  const uint64_t skip = first_byte - piece->offset;
  const uint64_t whole = (piece->bytes.size() - skip) / sizeof(float);
  if (whole > 0) {
    // The piece ends where the chunk does at the latest.
    const uint64_t n = std::min<uint64_t>(whole, max_elements);
    return EncodedFloats(piece->bytes.substr(skip, n * sizeof(float)));
  }
  // The element runs on into the next pieces (the chunk holds all of it).
  size_t copied = 0;
  for (; copied < sizeof(float); ++piece) {
    const absl::string_view part =
        piece->bytes.substr(copied == 0 ? skip : 0, sizeof(float) - copied);
    std::copy(part.begin(), part.end(), scratch.begin() + copied);
    copied += part.size();
  }
  return EncodedFloats(absl::string_view(scratch.data(), sizeof(float)));
}

void SliceGradient::Read(uint64_t begin, absl::Span<float> out) const {
  char scratch[sizeof(float)];
  while (!out.empty()) {
    const EncodedFloats run =
        View(begin, out.size(), absl::MakeSpan(scratch, sizeof(scratch)));
    for (size_t i = 0; i < run.size(); ++i) out[i] = run[i];
    out.remove_prefix(run.size());
    begin += run.size();
  }
}

void SliceGradient::ForEachPiece(
    absl::FunctionRef<void(absl::string_view)> fn) const {
  for (const std::shared_ptr<const Chunk>& chunk : chunks_) {
    for (const Piece& piece : chunk->pieces) fn(piece.bytes);
  }
}

}  // namespace ps::server
