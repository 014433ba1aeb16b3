#include "common/progress_line.h"

#include <cmath>
#include <limits>
#include <string>
#include <variant>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::Optional;

// What the worker's log shows for `message` (common/logging.cc's pattern).
std::string LogLine(int rank, const std::string& message) {
  return "12:00:00.000 [worker " + std::to_string(rank) + "] info: " + message;
}

template <typename T>
T ParseAs(const ProgressLine& written) {
  const std::string line = LogLine(0, FormatProgressLine(written));
  std::optional<ProgressLine> read = ParseProgressLine(InfoMessageOf(line));
  EXPECT_TRUE(read.has_value()) << line;
  EXPECT_TRUE(read.has_value() && std::holds_alternative<T>(*read)) << line;
  if (!read.has_value() || !std::holds_alternative<T>(*read)) return T();
  return std::get<T>(*read);
}

TEST(ProgressLineTest, PlanRoundTrips) {
  const PlanProgress plan{4690, 10, 469, 64};
  EXPECT_EQ(FormatProgressLine(plan),
            "training 4690 steps: 10 epochs of 469 steps, batch 64 per worker");
  const PlanProgress read = ParseAs<PlanProgress>(plan);
  EXPECT_EQ(read.planned_steps, 4690);
  EXPECT_EQ(read.epochs, 10);
  EXPECT_EQ(read.steps_per_epoch, 469);
  EXPECT_EQ(read.batch_size, 64);
}

TEST(ProgressLineTest, StepRoundTripsToItsPrintedPrecision) {
  const StepProgress step{2, 10, 100, 469, 0.43114, 21325.4, "0:12"};
  EXPECT_EQ(FormatProgressLine(step),
            "epoch 2/10 step 100/469 loss 0.4311 samples/s 21325 eta 0:12");
  const StepProgress read = ParseAs<StepProgress>(step);
  EXPECT_EQ(read.epoch, 2);
  EXPECT_EQ(read.epochs, 10);
  EXPECT_EQ(read.step, 100);
  EXPECT_EQ(read.steps_per_epoch, 469);
  EXPECT_DOUBLE_EQ(read.loss, 0.4311);
  EXPECT_DOUBLE_EQ(read.samples_per_second, 21325);
  EXPECT_EQ(read.eta, "0:12");
}

TEST(ProgressLineTest, EvalRoundTrips) {
  const EvalProgress eval{2, 10, 469, 0.87104, 9.12};
  EXPECT_EQ(FormatProgressLine(eval),
            "epoch 2/10 step 469 test accuracy 0.8710 after 9.1s");
  const EvalProgress read = ParseAs<EvalProgress>(eval);
  EXPECT_EQ(read.epoch, 2);
  EXPECT_EQ(read.epochs, 10);
  EXPECT_EQ(read.step, 469);
  EXPECT_DOUBLE_EQ(read.accuracy, 0.871);
  EXPECT_DOUBLE_EQ(read.seconds, 9.1);
}

TEST(ProgressLineTest, FinalAccuracyRoundTripsAndIsFoundAnywhere) {
  EXPECT_EQ(FormatProgressLine(FinalAccuracy{0.89714}),
            "final test accuracy: 0.8971");
  EXPECT_DOUBLE_EQ(ParseAs<FinalAccuracy>(FinalAccuracy{0.89714}).accuracy,
                   0.8971);
  const std::string line = LogLine(0, FormatProgressLine(FinalAccuracy{0.5}));
  EXPECT_THAT(FindFinalTestAccuracy(line), Optional(0.5));
  // As a program after -- prints it (examples/pytorch_fashion_mnist.py).
  EXPECT_THAT(FindFinalTestAccuracy("final test accuracy: 0.7500"),
              Optional(0.75));
}

TEST(ProgressLineTest, TrainedSummaryRoundTripsToItsPrintedPrecision) {
  const TrainedSummary trained{469, 30016, 7.10649, 0.30123};
  EXPECT_EQ(FormatProgressLine(trained),
            "trained 469 steps on 30016 examples in 7.106s, last loss 0.3012");
  const TrainedSummary read = ParseAs<TrainedSummary>(trained);
  EXPECT_EQ(read.steps, 469);
  EXPECT_EQ(read.examples, 30016);
  EXPECT_DOUBLE_EQ(read.seconds, 7.106);
  EXPECT_DOUBLE_EQ(read.last_loss, 0.3012);
}

TEST(ProgressLineTest, LastProgressOfFindsTheLastLineOfItsType) {
  const std::vector<std::string> lines = {
      LogLine(0, FormatProgressLine(FinalAccuracy{0.25})), "a program's print",
      LogLine(0, FormatProgressLine(FinalAccuracy{0.5})),
      LogLine(0, FormatProgressLine(StepTimeSplit{1, 2, 3}))};
  ASSERT_TRUE(LastProgressOf<FinalAccuracy>(lines).has_value());
  EXPECT_DOUBLE_EQ(LastProgressOf<FinalAccuracy>(lines)->accuracy, 0.5);
  EXPECT_FALSE(LastProgressOf<TrainedSummary>(lines).has_value());
}

TEST(ProgressLineTest, StepTimeSplitRoundTripsToItsPrintedPrecision) {
  const StepTimeSplit split{2.1794, 4.8731, 0};
  EXPECT_EQ(FormatProgressLine(split),
            "time per step: compute 2.179 ms, communication 4.873 ms, "
            "slowdown 0.000 ms");
  const StepTimeSplit read = ParseAs<StepTimeSplit>(split);
  EXPECT_DOUBLE_EQ(read.compute_ms, 2.179);
  EXPECT_DOUBLE_EQ(read.communication_ms, 4.873);
  EXPECT_DOUBLE_EQ(read.slowdown_ms, 0);
}

TEST(ProgressLineTest, RefusesImpossibleValues) {
  for (const char* message :
       {"epoch 3/2 step 1/2 loss 0.1 samples/s 1 eta 0:01",
        "epoch 0/2 step 1/2 loss 0.1 samples/s 1 eta 0:01",
        "epoch 1/2 step 3/2 loss 0.1 samples/s 1 eta 0:01",
        "epoch 1/2 step 1/2 loss nan samples/s 1 eta 0:01",
        "training 0 steps: 1 epochs of 0 steps, batch 64 per worker",
        "epoch 1/2 step 2 test accuracy 1.5 after 1.0s",
        "final test accuracy: -0.2", "final test accuracy: 0.5.1",
        "final test accuracy: n/a",
        "time per step: compute -1.000 ms, communication 1.000 ms, slowdown "
        "0.000 ms",
        "time per step: compute nan ms, communication 1.000 ms, slowdown "
        "0.000 ms"}) {
    EXPECT_FALSE(ParseProgressLine(message).has_value()) << message;
  }
}

TEST(ProgressLineTest, OtherMessagesAreNotProgress) {
  EXPECT_FALSE(ParseProgressLine("resuming at epoch 2 step 1 (clock 9)"));
  EXPECT_FALSE(ParseProgressLine("test accuracy: 0.9"));
  EXPECT_FALSE(FindFinalTestAccuracy("test accuracy: 0.9"));
}

TEST(ProgressLineTest, InfoMessageOfTakesOnlyInfoLinesOfTheLogPattern) {
  EXPECT_EQ(InfoMessageOf("12:00:00.000 [worker 3] info: hello"), "hello");
  EXPECT_EQ(InfoMessageOf("12:00:00.000 [worker 3] warning: hello"), "");
  EXPECT_EQ(InfoMessageOf("epoch 1/2 step 1/2 loss 0.1 samples/s 1 eta 0:01"),
            "");
  EXPECT_EQ(InfoMessageOf(std::string(50, 'x') + "] info: late"), "");
}

// Moved from deploy/local/summary_test.cc with the parser.
TEST(ProgressLineTest, FindsFinalTestAccuracyInALogLine) {
  EXPECT_THAT(FindFinalTestAccuracy("final test accuracy: 0.8912"),
              Optional(0.8912));
  EXPECT_THAT(FindFinalTestAccuracy(
                  "12:00:01.000 [worker 0] info: final test accuracy: 0.75 "
                  "(7500/10000)"),
              Optional(0.75));
  EXPECT_THAT(FindFinalTestAccuracy("final test accuracy:1"), Optional(1.0));
}

TEST(ProgressLineTest, IgnoresLinesWithoutAValidAccuracy) {
  for (const char* line :
       {"epoch 3/10 step 120/469 loss 0.4123",
        "final test accuracy:", "final test accuracy: n/a",
        "final test accuracy: 1.5", "final test accuracy: -0.2",
        "final test accuracy: 0.5.1", "test accuracy: 0.9"}) {
    EXPECT_FALSE(FindFinalTestAccuracy(line).has_value()) << line;
  }
}

}  // namespace
}  // namespace ps
