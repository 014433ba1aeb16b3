#ifndef PS_WORKER_WORKER_METRICS_H_
#define PS_WORKER_WORKER_METRICS_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace ps::worker {

// Where a training step's time went, as the worker sees it.
struct StepTiming {
  // Gathering the batch, forward and backward (gradients are handed to the
  // push as backward makes them).
  absl::Duration compute;
  // Blocked on the servers: the pull of the step's weights and the end of
  // its push (which brings the next weights back). It includes the
  // servers' wait for other workers, which they export apart
  // (ps_server_pull_wait_seconds, ps_server_wait_for_rank_seconds_total).
  absl::Duration communication;
  // Idle on purpose: --slowdown_ms.
  absl::Duration waiting;
};

// The Prometheus metrics of one worker, every series labelled
// rank="<rank>":
//   ps_worker_steps_total, ps_worker_examples_total
//   ps_worker_step_seconds                 histogram of whole steps
//   ps_worker_step_phase_seconds_total{phase="compute"|"communication"|
//                                      "waiting"}   (StepTiming)
//   ps_worker_examples_per_second          over the last second or more
//   ps_worker_loss                         the last step's training loss
//   ps_worker_epoch                        1-based
//   ps_worker_test_accuracy                rank 0's last evaluation
//   ps_worker_start_time_seconds, ps_worker_resumed (1: resumed a rank's
//   progress, e.g. after a restart)
//
// Thread-safe. Series are resolved once; a step costs a few atomic updates
// and one histogram observation. Shares the registry.
class WorkerMetrics {
 public:
  WorkerMetrics(std::shared_ptr<prometheus::Registry> registry, int rank);

  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // A step of `examples` examples and training loss `loss` in epoch
  // `epoch` (0-based) completed at `now`.
  void RecordStep(const StepTiming& timing, uint64_t examples, double loss,
                  uint64_t epoch, absl::Time now);
  void RecordTestAccuracy(double accuracy);
  void RecordResumed();

 private:
  prometheus::Counter& PhaseCounter(int rank, const char* phase);

  const std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter& steps_;
  prometheus::Counter& examples_;
  prometheus::Histogram& step_seconds_;
  prometheus::Family<prometheus::Counter>& phases_;
  prometheus::Counter& compute_seconds_;
  prometheus::Counter& communication_seconds_;
  prometheus::Counter& waiting_seconds_;
  prometheus::Gauge& examples_per_second_;
  prometheus::Gauge& loss_;
  prometheus::Gauge& epoch_;
  prometheus::Gauge& test_accuracy_;
  prometheus::Gauge& resumed_;

  absl::Mutex mu_;
  // The window examples_per_second is measured over.
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t window_examples_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ps::worker

#endif  // PS_WORKER_WORKER_METRICS_H_
