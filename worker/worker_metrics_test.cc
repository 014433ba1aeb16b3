#include "worker/worker_metrics.h"

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "common/metrics_http.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class WorkerMetricsTest : public ::testing::Test {
 protected:
  std::string Scrape() const { return SerializeMetrics(*registry_); }

  std::shared_ptr<prometheus::Registry> registry_ =
      std::make_shared<prometheus::Registry>();
  WorkerMetrics metrics_{registry_, 1};
};

TEST_F(WorkerMetricsTest, SplitsStepTimeByPhase) {
  const absl::Time t0 = absl::UnixEpoch() + absl::Hours(1000);
  StepTiming timing{absl::Milliseconds(30), absl::Milliseconds(10),
                    absl::Milliseconds(5)};
  metrics_.RecordStep(timing, 64, 0.5, 0, t0);
  metrics_.RecordStep(timing, 64, 0.25, 2, t0 + absl::Milliseconds(45));
  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("ps_worker_steps_total{rank=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_examples_total{rank=\"1\"} 128\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_step_phase_seconds_total{phase="
                              "\"compute\",rank=\"1\"} 0.06\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_step_phase_seconds_total{phase="
                              "\"communication\",rank=\"1\"} 0.02\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_step_phase_seconds_total{phase="
                              "\"waiting\",rank=\"1\"} 0.01\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_step_seconds_count{rank=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_step_seconds_bucket{rank=\"1\","
                              "le=\"0.05\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_loss{rank=\"1\"} 0.25\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_epoch{rank=\"1\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_resumed{rank=\"1\"} 0\n"));
}

TEST_F(WorkerMetricsTest, MeasuresExamplesPerSecondOverASecondOrMore) {
  const absl::Time t0 = absl::UnixEpoch() + absl::Hours(1000);
  const StepTiming step{absl::Milliseconds(250), absl::ZeroDuration(),
                        absl::ZeroDuration()};
  // Steps of 250 ms: the rate is first measured once a second has passed.
  for (int i = 1; i <= 3; ++i) {
    metrics_.RecordStep(step, 100, 1, 0, t0 + i * absl::Milliseconds(250));
  }
  EXPECT_THAT(Scrape(),
              HasSubstr("ps_worker_examples_per_second{rank=\"1\"} 0\n"));
  metrics_.RecordStep(step, 100, 1, 0, t0 + absl::Seconds(1));
  EXPECT_THAT(Scrape(),
              HasSubstr("ps_worker_examples_per_second{rank=\"1\"} 400\n"));
  // Then twice as fast.
  for (int i = 1; i <= 8; ++i) {
    metrics_.RecordStep(step, 100, 1, 0,
                        t0 + absl::Seconds(1) + i * absl::Milliseconds(125));
  }
  EXPECT_THAT(Scrape(),
              HasSubstr("ps_worker_examples_per_second{rank=\"1\"} 800\n"));
}

TEST_F(WorkerMetricsTest, RecordsAccuracyAndResumption) {
  EXPECT_THAT(Scrape(), Not(HasSubstr("ps_worker_test_accuracy{rank=\"1\"} "
                                      "0.8")));
  metrics_.RecordTestAccuracy(0.875);
  metrics_.RecordResumed();
  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("ps_worker_test_accuracy{rank=\"1\"} 0.875\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_resumed{rank=\"1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_start_time_seconds{rank=\"1\"} "));
}

}  // namespace
}  // namespace ps::worker
