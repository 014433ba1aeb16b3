#include "deploy/local/training_progress.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using Kind = TrainingProgress::LineKind;

TEST(TrainingProgressTest, ReadsOurWorkersLinesOnly) {
  TrainingProgress progress;
  EXPECT_EQ(progress.Feed(0,
                          "12:00:00.000 [worker 0] info: epoch 1/2 step "
                          "100/200 loss 0.5000 samples/s 20000 eta 0:03"),
            Kind::kStep);
  EXPECT_EQ(progress.Feed(1,
                          "12:00:00.001 [worker 1] info: epoch 1/2 step "
                          "100/200 loss 0.7000 samples/s 21000 eta 0:03"),
            Kind::kStep);
  // A program's own print, and an accuracy line of another rank.
  EXPECT_EQ(progress.Feed(0,
                          "epoch 1/2 step 150/200 loss 0.1 samples/s 1 "
                          "eta 0:01"),
            Kind::kOther);
  EXPECT_EQ(progress.Feed(1,
                          "12:00:01.000 [worker 1] info: epoch 1/2 step "
                          "200 test accuracy 0.5000 after 1.0s"),
            Kind::kOther);
  // Rank 0's end-of-training summaries are not progress.
  EXPECT_EQ(progress.Feed(0,
                          "12:00:02.000 [worker 0] info: trained 200 steps on "
                          "12800 examples in 3.000s, last loss 0.5000"),
            Kind::kOther);
  EXPECT_EQ(progress.Feed(0,
                          "12:00:02.000 [worker 0] info: time per step: "
                          "compute 1.000 ms, communication 2.000 ms, "
                          "slowdown 0.000 ms"),
            Kind::kOther);
  const ProgressSnapshot s = progress.Snapshot();
  EXPECT_TRUE(s.started);
  EXPECT_EQ(s.epoch, 1);
  EXPECT_EQ(s.step, 100);
  EXPECT_DOUBLE_EQ(s.loss, 0.6);  // Mean of each rank's latest.
  EXPECT_DOUBLE_EQ(s.fraction, 0.25);
  EXPECT_EQ(s.eta, "0:03");
  EXPECT_FALSE(s.last_test_accuracy.has_value());
}

TEST(TrainingProgressTest, KeepsEachEpochsLossAndAccuracy) {
  TrainingProgress progress;
  EXPECT_EQ(progress.Feed(0,
                          "t [worker 0] info: training 400 steps: 2 "
                          "epochs of 200 steps, batch 64 per worker"),
            Kind::kStart);
  EXPECT_EQ(progress.Snapshot().steps_per_epoch, 200);
  progress.Feed(0,
                "t [worker 0] info: epoch 1/2 step 100/200 loss 0.6000 "
                "samples/s 1 eta 0:01");
  progress.Feed(0,
                "t [worker 0] info: epoch 1/2 step 200/200 loss 0.4000 "
                "samples/s 1 eta 0:01");
  EXPECT_EQ(progress.Feed(0,
                          "t [worker 0] info: epoch 1/2 step 200 test "
                          "accuracy 0.8000 after 2.0s"),
            Kind::kTestAccuracy);
  EXPECT_TRUE(progress.Snapshot().last_eval_at_epoch_end);
  progress.Feed(0,
                "t [worker 0] info: epoch 2/2 step 100/200 loss 0.3000 "
                "samples/s 1 eta 0:01");
  EXPECT_EQ(progress.Feed(0, "t [worker 0] info: final test accuracy: 0.8500"),
            Kind::kFinalAccuracy);
  const std::vector<EpochRecord> history = progress.History();
  ASSERT_EQ(history.size(), 2u);
  EXPECT_DOUBLE_EQ(*history[0].train_loss, 0.5);
  EXPECT_DOUBLE_EQ(*history[0].test_accuracy, 0.8);
  EXPECT_DOUBLE_EQ(*history[1].train_loss, 0.3);
  EXPECT_DOUBLE_EQ(*history[1].test_accuracy, 0.85);
  EXPECT_EQ(HistoryCsv(history),
            "epoch,train_loss,test_accuracy\n1,0.500000,0.8000\n"
            "2,0.300000,0.8500\n");
}

TEST(TrainingProgressTest, RefusesImpossibleValues) {
  TrainingProgress progress;
  EXPECT_EQ(progress.Feed(0,
                          "t [worker 0] info: epoch 3/2 step 1/2 loss 0.1 "
                          "samples/s 1 eta 0:01"),
            Kind::kOther);
  EXPECT_EQ(progress.Feed(0, "t [worker 0] info: final test accuracy: 1.5"),
            Kind::kOther);
  EXPECT_FALSE(progress.Snapshot().started);
  EXPECT_EQ(HistoryCsv(progress.History()), "epoch,train_loss,test_accuracy\n");
}

TEST(TrainingProgressTest, HistoryCsvRoundTripsAndMergesAfterAResume) {
  std::vector<EpochRecord> earlier(2);
  earlier[0] = {1, 0.5, 0.8};
  earlier[1] = {2, 0.4, std::nullopt};  // Stopped mid-epoch.
  absl::StatusOr<std::vector<EpochRecord>> parsed =
      ParseHistoryCsv(HistoryCsv(earlier));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(HistoryCsv(*parsed), HistoryCsv(earlier));
  std::vector<EpochRecord> later(2);
  later[0] = {2, 0.3, 0.85};
  later[1] = {3, 0.2, 0.86};
  EXPECT_EQ(HistoryCsv(MergeHistory(*parsed, later)),
            "epoch,train_loss,test_accuracy\n1,0.500000,0.8000\n"
            "2,0.300000,0.8500\n3,0.200000,0.8600\n");
  EXPECT_FALSE(ParseHistoryCsv("epoch,train_loss,test_accuracy\nx,1,2\n").ok());
}

}  // namespace
}  // namespace ps
