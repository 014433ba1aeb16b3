#include "worker/ring_checkpoint.h"

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "allreduce/ring_testing.h"
#include "gtest/gtest.h"
#include "update/checkpoint.h"

namespace ps::worker {
namespace {

ModelSpec Model(int width) {
  ModelSpec model;
  model.tensors.push_back(
      {"w", DType::kFloat32, {2, width}, InitializerSpec::Constant(1)});
  return model;
}

// Adam, so that there is optimizer state to keep; one step taken.
std::unique_ptr<LocalExchange> TrainedLocal(int width = 3, int steps = 1) {
  update::OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  absl::StatusOr<std::unique_ptr<LocalExchange>> local =
      LocalExchange::Create(Model(width), adam, std::nullopt);
  EXPECT_TRUE(local.ok()) << local.status();
  (*local)->Declare(100);
  for (int i = 0; i < steps; ++i) {
    StepInfo info;
    info.num_examples = 4;
    std::unique_ptr<StepPush> push = (*local)->StartStep(info, false);
    EXPECT_TRUE(push->Send(0, std::vector<float>(2 * width, 0.5f)).ok());
    EXPECT_TRUE(push->Finish().ok());
  }
  return *std::move(local);
}

TEST(RingCheckpointTest, EveryRankResumesAtItsOwnPosition) {
  std::unique_ptr<LocalExchange> trained = TrainedLocal(3, 2);
  const std::vector<DataCursor> cursors = {{1, 64}, {1, 32}};
  const update::ShardCheckpoint checkpoint =
      TakeRingCheckpoint(*trained, cursors);
  EXPECT_EQ(checkpoint.identity.mode, "allreduce");
  // Through the file format, as a restart reads it.
  absl::StatusOr<update::ShardCheckpoint> decoded =
      update::DecodeCheckpoint(update::EncodeCheckpoint(checkpoint));
  ASSERT_TRUE(decoded.ok()) << decoded.status();

  std::unique_ptr<LocalExchange> fresh = TrainedLocal(3, 0);
  absl::StatusOr<Registration> resumed =
      RestoreRingCheckpoint(*decoded, 1, *fresh);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->num_workers, 2);
  EXPECT_EQ(resumed->next_step, 2u);
  EXPECT_EQ(resumed->cursor.epoch, 1u);
  EXPECT_EQ(resumed->cursor.examples_done, 32u);
  EXPECT_EQ(fresh->version(), 2u);
  TensorValues a, b;
  ASSERT_TRUE(trained->Pull(0, a).ok());
  ASSERT_TRUE(fresh->Pull(0, b).ok());
  EXPECT_EQ(a, b);
  // And the optimizer state came along: the next steps agree too.
  ASSERT_EQ(fresh->Snapshot()[0].state, trained->Snapshot()[0].state);
}

TEST(RingCheckpointTest, RefusesAnotherModelOrRank) {
  const update::ShardCheckpoint checkpoint =
      TakeRingCheckpoint(*TrainedLocal(3), std::vector<DataCursor>(2));
  std::unique_ptr<LocalExchange> other = TrainedLocal(4, 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      RestoreRingCheckpoint(checkpoint, 0, *other).status()));
  EXPECT_EQ(other->version(), 0u);
  std::unique_ptr<LocalExchange> same = TrainedLocal(3, 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      RestoreRingCheckpoint(checkpoint, 2, *same).status()));
}

// Rank 0's checkpoint, or its having none, reaches every rank.
TEST(RingCheckpointTest, ShareFromRank0ReachesEveryRank) {
  constexpr int kRanks = 3;
  const update::ShardCheckpoint checkpoint =
      TakeRingCheckpoint(*TrainedLocal(3, 2), std::vector<DataCursor>(kRanks));
  for (const bool rank0_has_one : {true, false}) {
    std::vector<std::optional<update::ShardCheckpoint>> received(kRanks);
    allreduce::RunRingInThreads(kRanks, [&](allreduce::GlooGroup& group) {
      // What the other ranks pass is ignored.
      std::optional<update::ShardCheckpoint> mine;
      if (group.rank() == 0 ? rank0_has_one : true) mine = checkpoint;
      absl::StatusOr<std::optional<update::ShardCheckpoint>> shared =
          ShareFromRank0(group, mine);
      ASSERT_TRUE(shared.ok()) << shared.status();
      received[group.rank()] = *shared;
    });
    for (int rank = 0; rank < kRanks; ++rank) {
      ASSERT_EQ(received[rank].has_value(), rank0_has_one) << rank;
      if (rank0_has_one) {
        EXPECT_EQ(received[rank]->version, 2u);
        EXPECT_EQ(received[rank]->slices[0].weights,
                  checkpoint.slices[0].weights);
      }
    }
  }
}

}  // namespace
}  // namespace ps::worker
