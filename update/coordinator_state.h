#ifndef PS_UPDATE_COORDINATOR_STATE_H_
#define PS_UPDATE_COORDINATOR_STATE_H_

// The state of a shard's coordinator that a checkpoint keeps beside the
// weights (update/checkpoint.h), as plain values: each rank's record, the
// examples applied, and the staleness histogram. The server keeps them while
// it runs (its rank registry and statistics).

#include <array>
#include <cstdint>
#include <map>
#include <vector>

namespace ps::update {

// Data progress of one rank: it has trained on `examples_done` examples of
// its share of epoch `epoch`. Ordered by (epoch, examples_done).
struct DataProgress {
  uint64_t epoch = 0;
  uint64_t examples_done = 0;

  bool operator<(const DataProgress& o) const {
    return epoch != o.epoch ? epoch < o.epoch : examples_done < o.examples_done;
  }
  bool operator==(const DataProgress& o) const {
    return epoch == o.epoch && examples_done == o.examples_done;
  }
};

// What a checkpoint keeps of a rank: its state as of the last update that
// reached the weights (a sync push still waiting for its step is not in it).
struct RankRecord {
  uint64_t incarnation = 0;
  // The rank's next step: it has done steps [0, clock). The checkpoint file's
  // name for it.
  uint64_t clock = 0;
  DataProgress progress;
  bool done = false;
  // The most examples a push of the rank may carry (0: no bound).
  uint32_t max_examples = 0;

  bool operator==(const RankRecord& o) const {
    return incarnation == o.incarnation && clock == o.clock &&
           progress == o.progress && done == o.done &&
           max_examples == o.max_examples;
  }
};

// Examples of the pushes that reached the weights: epoch -> one count per
// rank.
using ExampleCounts = std::map<uint64_t, std::vector<uint64_t>>;

// Everything a staleness histogram holds (how stale the applied gradients
// were): values 0..kExactBuckets-1 counted exactly, larger ones in
// power-of-two buckets ([32, 63], [64, 127], ...).
struct StalenessHistogramState {
  static constexpr int kExactBuckets = 32;
  static constexpr int kNumBuckets = kExactBuckets + 59;  // Up to 2^64 - 1.

  std::array<uint64_t, kNumBuckets> buckets = {};
  uint64_t count = 0;
  uint64_t max = 0;
  double sum = 0;
};

}  // namespace ps::update

#endif  // PS_UPDATE_COORDINATOR_STATE_H_
