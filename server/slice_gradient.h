#ifndef PS_SERVER_SLICE_GRADIENT_H_
#define PS_SERVER_SLICE_GRADIENT_H_

#include <cstdint>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/types/span.h"

namespace ps::server {

// One push's gradient for one shard slice, kept as its bytes arrived: the
// chunks' cords over the network buffers, decoded only when the update reads
// them, a block at a time into memory the updating thread keeps in cache.
// Staging every push into a slice-sized float buffer instead cost a copy of
// each pushed byte through main memory (bench/README.md).
//
// Not thread-safe to change; Read may run concurrently with Read.
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

  // Decodes elements [begin, begin + out.size()) into `out`. Every one of
  // them must have been added.
  void Read(uint64_t begin, absl::Span<float> out) const;

 private:
  struct Chunk {
    uint64_t begin = 0;  // First element.
    uint64_t size = 0;   // Elements.
    absl::Cord bytes;
  };

  // The first chunk that starts after `element` (end() if none).
  std::vector<Chunk>::const_iterator FirstChunkAfter(uint64_t element) const;

  std::vector<Chunk> chunks_;  // By `begin`; disjoint.
  uint64_t num_elements_ = 0;
};

}  // namespace ps::server

#endif  // PS_SERVER_SLICE_GRADIENT_H_
