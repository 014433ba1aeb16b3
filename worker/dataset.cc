#include "worker/dataset.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_format.h"

namespace ps::worker {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): tiny, fully specified, so the same
// seed gives the same stream with any compiler or standard library.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, range), range >= 1, without modulo bias: Lemire's
  // multiply-and-reject method on the top 32 bits of each draw.
  uint32_t Below(uint32_t range) {
    uint64_t m = (Next() >> 32) * range;
    uint32_t low = static_cast<uint32_t>(m);
    if (low < range) {
      const uint32_t threshold = (0u - range) % range;
      while (low < threshold) {
        m = (Next() >> 32) * range;
        low = static_cast<uint32_t>(m);
      }
    }
    return static_cast<uint32_t>(m >> 32);
  }

 private:
  uint64_t state_;
};

// A generator state per (seed, epoch). SplitMix64's first output is a
// bijection of its seed, so for one seed distinct epochs never share a stream.
uint64_t EpochStreamSeed(uint64_t seed, uint64_t epoch) {
  return SplitMix64(SplitMix64(seed).Next() ^ epoch).Next();
}

}  // namespace

EpochSharder::EpochSharder(uint64_t num_examples, uint32_t num_workers,
                           uint32_t batch_size, uint64_t seed)
    : num_examples_(num_examples),
      num_workers_(num_workers),
      batch_size_(batch_size),
      seed_(seed),
      global_batch_(uint64_t{num_workers} * batch_size),
      full_steps_(num_examples / global_batch_),
      steps_per_epoch_(full_steps_ +
                       (num_examples % global_batch_ != 0 ? 1 : 0)) {}

absl::StatusOr<EpochSharder> EpochSharder::Create(uint64_t num_examples,
                                                  uint32_t num_workers,
                                                  uint32_t batch_size,
                                                  uint64_t seed) {
  if (num_examples == 0 || num_examples > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("number of examples must be in [1, %d], got %d",
                        UINT32_MAX, num_examples));
  }
  if (num_workers == 0) {
    return absl::InvalidArgumentError("number of workers must be at least 1");
  }
  if (batch_size == 0) {
    return absl::InvalidArgumentError(
        "per-worker batch size must be at least 1");
  }
  return EpochSharder(num_examples, num_workers, batch_size, seed);
}

std::vector<uint32_t> EpochSharder::Permutation(uint64_t epoch) const {
  std::vector<uint32_t> order(num_examples_);
  std::iota(order.begin(), order.end(), 0u);
  SplitMix64 rng(EpochStreamSeed(seed_, epoch));
  for (uint64_t i = num_examples_ - 1; i > 0; --i) {
    const uint32_t j = rng.Below(static_cast<uint32_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

EpochPlan EpochSharder::PlanEpoch(uint64_t epoch) const {
  return EpochPlan(*this, epoch);
}

absl::Status EpochSharder::CheckStepAndRank(uint64_t step,
                                            uint32_t rank) const {
  if (step >= steps_per_epoch_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step %d is out of range: an epoch has %d steps", step,
                        steps_per_epoch_));
  }
  if (rank >= num_workers_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("worker rank %d is out of range: there are %d workers",
                        rank, num_workers_));
  }
  return absl::OkStatus();
}

uint64_t EpochSharder::BlockStart(uint64_t step, uint32_t rank) const {
  const uint64_t batch_start = step * global_batch_;
  if (step < full_steps_) return batch_start + uint64_t{rank} * batch_size_;
  const uint64_t remaining = num_examples_ - batch_start;
  const uint64_t base = remaining / num_workers_;
  const uint64_t extra = remaining % num_workers_;
  return batch_start + rank * base + std::min<uint64_t>(rank, extra);
}

uint64_t EpochSharder::BlockSize(uint64_t step, uint32_t rank) const {
  if (step < full_steps_) return batch_size_;
  const uint64_t remaining = num_examples_ - step * global_batch_;
  const uint64_t base = remaining / num_workers_;
  return base + (rank < remaining % num_workers_ ? 1 : 0);
}

absl::StatusOr<std::vector<uint32_t>> EpochSharder::BatchIndices(
    uint64_t epoch, uint64_t step, uint32_t rank) const {
  if (absl::Status s = CheckStepAndRank(step, rank); !s.ok()) return s;
  const std::vector<uint32_t> order = Permutation(epoch);
  const auto begin = order.begin() + BlockStart(step, rank);
  return std::vector<uint32_t>(begin, begin + BlockSize(step, rank));
}

absl::StatusOr<uint64_t> EpochSharder::BatchSizeAt(uint64_t step,
                                                   uint32_t rank) const {
  if (absl::Status s = CheckStepAndRank(step, rank); !s.ok()) return s;
  return BlockSize(step, rank);
}

absl::StatusOr<uint64_t> EpochSharder::ExamplesBeforeStep(uint64_t step,
                                                          uint32_t rank) const {
  if (step > steps_per_epoch_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step %d is out of range: an epoch has %d steps", step,
                        steps_per_epoch_));
  }
  if (rank >= num_workers_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("worker rank %d is out of range: there are %d workers",
                        rank, num_workers_));
  }
  uint64_t done = std::min(step, full_steps_) * batch_size_;
  if (step > full_steps_) done += BlockSize(full_steps_, rank);
  return done;
}

absl::StatusOr<uint64_t> EpochSharder::ResumeStep(
    uint32_t rank, uint64_t examples_done) const {
  absl::StatusOr<uint64_t> total = ExamplesBeforeStep(steps_per_epoch_, rank);
  if (!total.ok()) return total.status();
  if (examples_done == *total) return steps_per_epoch_;
  // Below the total, only the full steps' boundaries k * b remain.
  if (examples_done < *total && examples_done % batch_size_ == 0 &&
      examples_done / batch_size_ <= full_steps_) {
    return examples_done / batch_size_;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "worker %d cannot have trained on %d examples of an epoch: it gets "
      "batches of %d, %d examples in all",
      rank, examples_done, batch_size_, *total));
}

EpochPlan::EpochPlan(const EpochSharder& sharder, uint64_t epoch)
    : sharder_(sharder), epoch_(epoch), order_(sharder.Permutation(epoch)) {}

absl::StatusOr<absl::Span<const uint32_t>> EpochPlan::BatchIndices(
    uint64_t step, uint32_t rank) const {
  if (absl::Status s = sharder_.CheckStepAndRank(step, rank); !s.ok()) {
    return s;
  }
  return absl::Span<const uint32_t>(order_).subspan(
      sharder_.BlockStart(step, rank), sharder_.BlockSize(step, rank));
}

absl::Status GatherBatch(const LabeledImages& data,
                         absl::Span<const uint32_t> indices, Batch* out) {
  const int64_t example_size = data.example_size();
  if (data.num_examples < 0 ||
      data.images.size() != data.num_examples * example_size ||
      data.labels.size() != data.num_examples) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "inconsistent data set: %d examples of %d floats, but %d image floats "
        "and %d labels",
        data.num_examples, example_size, data.images.size(),
        data.labels.size()));
  }
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] >= data.num_examples) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "batch entry %d is example %d, but the data set has %d examples", i,
          indices[i], data.num_examples));
    }
  }
  out->size = static_cast<int64_t>(indices.size());
  out->example_size = example_size;
  out->images.resize(indices.size() * example_size);
  out->labels.resize(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    std::memcpy(out->images.data() + i * example_size,
                data.images.data() + indices[i] * example_size,
                example_size * sizeof(float));
    out->labels[i] = data.labels[indices[i]];
  }
  return absl::OkStatus();
}

}  // namespace ps::worker
