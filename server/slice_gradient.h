#ifndef PS_SERVER_SLICE_GRADIENT_H_
#define PS_SERVER_SLICE_GRADIENT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor_codec.h"

namespace ps::server {

// One push's gradient for one shard slice, kept as its bytes arrived: the
// chunks' cords over the network buffers, read by the update where they lie.
// Staging every push into a slice-sized float buffer instead cost a copy of
// each pushed byte through main memory, and decoding it a block at a time
// into the updating thread's cache still cost a copy (bench/README.md).
//
// Not thread-safe to change; View and Read may run concurrently with each
// other. Copies share the received bytes.
class SliceGradient {
 public:
  SliceGradient() = default;

  // A gradient held as floats (tests, tools): encoded once.
  static SliceGradient FromFloats(absl::Span<const float> values);

  // Adds the chunk that holds elements [begin, begin + bytes.size() / 4).
  // The caller has checked that the bytes are whole float32 elements and
  // that the chunk overlaps none added before (PushStager does both).
  void Add(uint64_t begin, absl::Cord bytes);

  // Elements added so far.
  uint64_t num_elements() const { return num_elements_; }

  // Elements [begin, begin + n) for some n in [1, max_elements], read in
  // place: as many as lie together in one piece of the received bytes. An
  // element split between two pieces (the network cuts anywhere) comes
  // alone, copied into `scratch` (at least 4 bytes). Element `begin` must
  // have been added.
  EncodedFloats View(uint64_t begin, size_t max_elements,
                     absl::Span<char> scratch) const;

  // Decodes elements [begin, begin + out.size()) into `out`. Every one of
  // them must have been added.
  void Read(uint64_t begin, absl::Span<float> out) const;

  // Calls `fn` with the received bytes of every element, in element order,
  // where they lie (pieces may split an element). Every element must have
  // been added. The views live as long as this gradient or a copy of it.
  void ForEachPiece(absl::FunctionRef<void(absl::string_view)> fn) const;

 private:
  // A piece of a chunk's bytes, as the cord holds it.
  struct Piece {
    uint64_t offset = 0;  // Of its first byte in the chunk.
    absl::string_view bytes;
  };
  // Immutable once built, and shared by copies: `pieces` point into
  // `bytes`, which must therefore stay where it is.
  struct Chunk {
    uint64_t begin = 0;  // First element.
    uint64_t size = 0;   // Elements.
    absl::Cord bytes;
    std::vector<Piece> pieces;  // By offset; none empty.
  };

  using ChunkList = std::vector<std::shared_ptr<const Chunk>>;

  // The first chunk that starts after `element` (end() if none).
  ChunkList::const_iterator FirstChunkAfter(uint64_t element) const;
  // The chunk that holds `element`, which must have been added.
  const Chunk& ChunkHolding(uint64_t element) const;

  ChunkList chunks_;  // By `begin`; disjoint.
  uint64_t num_elements_ = 0;
};

}  // namespace ps::server

#endif  // PS_SERVER_SLICE_GRADIENT_H_
