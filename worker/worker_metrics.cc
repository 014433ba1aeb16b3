#include "worker/worker_metrics.h"

#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "common/metrics_http.h"
#include "prometheus/family.h"

namespace ps::worker {
namespace {

constexpr absl::Duration kRateWindow = absl::Seconds(1);

prometheus::Labels RankLabel(int rank) {
  return {{"rank", std::to_string(rank)}};
}

prometheus::Counter& RankCounter(prometheus::Registry& registry,
                                 const char* name, const char* help, int rank) {
  return AddCounter(registry, name, help, RankLabel(rank));
}

prometheus::Gauge& RankGauge(prometheus::Registry& registry, const char* name,
                             const char* help, int rank) {
  return AddGauge(registry, name, help, RankLabel(rank));
}

}  // namespace

WorkerMetrics::WorkerMetrics(std::shared_ptr<prometheus::Registry> registry,
                             int rank)
    : registry_(std::move(registry)),
      steps_(RankCounter(*registry_, "ps_worker_steps_total",
                         "Training steps completed.", rank)),
      examples_(RankCounter(*registry_, "ps_worker_examples_total",
                            "Training examples this worker computed on.",
                            rank)),
      step_seconds_(prometheus::BuildHistogram()
                        .Name("ps_worker_step_seconds")
                        .Help("Duration of whole training steps.")
                        .Register(*registry_)
                        .Add(RankLabel(rank),
                             prometheus::Histogram::BucketBoundaries{
                                 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                 0.25, 0.5, 1, 2.5, 5, 10, 30})),
      phases_(prometheus::BuildCounter()
                  .Name("ps_worker_step_phase_seconds_total")
                  .Help("Step time by phase: compute (batch, forward, "
                        "backward), communication (blocked on the servers, "
                        "their wait for other workers included), waiting "
                        "(--slowdown_ms).")
                  .Register(*registry_)),
      compute_seconds_(PhaseCounter(rank, "compute")),
      communication_seconds_(PhaseCounter(rank, "communication")),
      waiting_seconds_(PhaseCounter(rank, "waiting")),
      examples_per_second_(RankGauge(
          *registry_, "ps_worker_examples_per_second",
          "Examples this worker trains on per second, over the last second "
          "or more.",
          rank)),
      loss_(RankGauge(*registry_, "ps_worker_loss",
                      "Training loss of the last step.", rank)),
      epoch_(RankGauge(*registry_, "ps_worker_epoch",
                       "The epoch being trained (1-based).", rank)),
      test_accuracy_(RankGauge(*registry_, "ps_worker_test_accuracy",
                               "Accuracy on the test set at the last "
                               "evaluation.",
                               rank)),
      resumed_(RankGauge(*registry_, "ps_worker_resumed",
                         "1 if this worker resumed its rank's progress.",
                         rank)) {
  RankGauge(*registry_, "ps_worker_start_time_seconds",
            "When this worker process started (Unix time).", rank)
      .Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
}

prometheus::Counter& WorkerMetrics::PhaseCounter(int rank, const char* phase) {
  return phases_.Add({{"rank", std::to_string(rank)}, {"phase", phase}});
}

void WorkerMetrics::RecordStep(const StepTiming& timing, uint64_t examples,
                               double loss, uint64_t epoch, absl::Time now) {
  examples_.Increment(static_cast<double>(examples));
  step_seconds_.Observe(absl::ToDoubleSeconds(
      timing.compute + timing.communication + timing.waiting));
  compute_seconds_.Increment(absl::ToDoubleSeconds(timing.compute));
  communication_seconds_.Increment(absl::ToDoubleSeconds(timing.communication));
  waiting_seconds_.Increment(absl::ToDoubleSeconds(timing.waiting));
  loss_.Set(loss);
  epoch_.Set(static_cast<double>(epoch + 1));
  // Last: a scrape between these updates sees the step's parts before the
  // step itself, never a step without them.
  steps_.Increment();

  absl::MutexLock lock(&mu_);
  if (window_start_ == absl::InfinitePast()) {
    // The first step's examples count from its own start.
    window_start_ =
        now - (timing.compute + timing.communication + timing.waiting);
  }
  window_examples_ += examples;
  const absl::Duration elapsed = now - window_start_;
  if (elapsed >= kRateWindow) {
    examples_per_second_.Set(static_cast<double>(window_examples_) /
                             absl::ToDoubleSeconds(elapsed));
    window_start_ = now;
    window_examples_ = 0;
  }
}

void WorkerMetrics::RecordTestAccuracy(double accuracy) {
  test_accuracy_.Set(accuracy);
}

void WorkerMetrics::RecordResumed() { resumed_.Set(1); }

}  // namespace ps::worker
