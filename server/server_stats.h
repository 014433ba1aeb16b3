#ifndef PS_SERVER_SERVER_STATS_H_
#define PS_SERVER_SERVER_STATS_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/shard_report.h"
#include "update/coordinator_state.h"

namespace ps::server {

class ServerMetrics;

// How stale the gradients applied by a shard were: for each update, the
// shard's version when it was applied minus the version the gradient was
// computed from. Values 0..31 are counted exactly, larger ones in
// power-of-two buckets ([32, 63], [64, 127], ...).
//
// Thread-safe; Add is one brief critical section.
class StalenessHistogram {
 public:
  static constexpr int kExactBuckets =
      update::StalenessHistogramState::kExactBuckets;
  static constexpr int kNumBuckets =
      update::StalenessHistogramState::kNumBuckets;

  void Add(uint64_t staleness);

  uint64_t count() const;
  uint64_t max() const;
  double mean() const;
  // Updates counted in the bucket holding `staleness`.
  uint64_t CountInBucketOf(uint64_t staleness) const;

  // "staleness (updates: 12, mean 0.25, max 3): 0:9 1:2 3:1"; empty buckets
  // are left out, a range bucket is written "32-63:4".
  std::string ToString() const;

  static int BucketOf(uint64_t staleness);

  // Everything the histogram holds, for checkpoints.
  using State = update::StalenessHistogramState;
  State state() const;
  void Restore(const State& state);

 private:
  mutable absl::Mutex mu_;
  std::array<uint64_t, kNumBuckets> buckets_ ABSL_GUARDED_BY(mu_) = {};
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t max_ ABSL_GUARDED_BY(mu_) = 0;
  // Sum as double: cannot overflow, and it only feeds the mean.
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// Request counters of one shard for the Stats RPC and the exit report:
// pushes and pulls (served and refused), bytes each way and latency, with
// the part of it that was not transfer. With `metrics`, every record also
// feeds the shard's Prometheus metrics.
//
// Thread-safe; each Record is one brief critical section. Does not own
// `metrics`, which must outlive it.
class ServerStats {
 public:
  explicit ServerStats(ServerMetrics* metrics = nullptr) : metrics_(metrics) {}

  // `outcome` is the call's: OK counts it as accepted, an error as refused
  // (for the metrics, by its code). `commit` is the part of `latency` after
  // the stream was received: taking part in the step and, for the push that
  // completes it (every push outside sync mode), applying the update while
  // the worker waits.
  void RecordPush(const absl::Status& outcome, uint64_t bytes,
                  absl::Duration commit, absl::Duration latency);
  // `wait` is the part of `latency` spent waiting for the consistency model
  // (other workers' pushes), reported apart from the transfer.
  void RecordPull(const absl::Status& outcome, uint64_t bytes,
                  absl::Duration wait, absl::Duration latency);

  // Whether RecordWaitFor and RecordRegistration are used: only the metrics
  // keep them, so callers may skip finding out what to pass.
  bool exports_metrics() const { return metrics_ != nullptr; }
  // A pull waited `wait` for `blocking` (the ranks it waited for when it
  // began).
  void RecordWaitFor(absl::Span<const int> blocking, absl::Duration wait);
  // `rank` registered as `incarnation` (a new one: the worker restarted).
  void RecordRegistration(int rank, uint64_t incarnation);

  uint64_t pushes_accepted() const;
  uint64_t pushes_refused() const;
  uint64_t pulls_served() const;
  uint64_t pulls_refused() const;

  // Multi-line, human-readable.
  std::string ToString() const;
  // The same figures for the shard's report file.
  RequestFigures push_figures() const;
  RequestFigures pull_figures() const;

 private:
  struct Counter {
    uint64_t ok = 0;
    uint64_t refused = 0;
    uint64_t bytes = 0;
    absl::Duration total_latency;
    absl::Duration max_latency;
    // Pushes: committing; pulls: waiting (see Record*).
    absl::Duration total_part;
  };
  static void Record(Counter& c, bool ok, uint64_t bytes,
                     absl::Duration latency);
  static std::string Format(const char* name, const char* bytes_verb,
                            const char* part_name, const Counter& c);
  static RequestFigures Figures(const Counter& c);

  ServerMetrics* const metrics_;
  mutable absl::Mutex mu_;
  Counter push_ ABSL_GUARDED_BY(mu_);
  Counter pull_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_SERVER_STATS_H_
