// UpdateCoordinator's replay across update log files: a file begins by
// restating the records of the step being collected (or applied) that the
// file before it holds too; the replay recognises them byte for byte and
// applies them once, and refuses files that disagree or leave a gap.
#include <string>
#include <variant>
#include <vector>

#include "gtest/gtest.h"
#include "server/coordinator_log_testing.h"
#include "server/coordinator_test_util.h"
#include "server/update_coordinator.h"
#include "update/checkpoint.h"
#include "update/update_log_record.h"

namespace ps::server {
namespace {

using ::ps::server::testing::Adam;
using ::ps::server::testing::AllWeights;
using ::ps::server::testing::ConstantPush;
using ::ps::server::testing::CoordinatorLogTest;
using ::ps::server::testing::ExpectBitIdentical;
using ::ps::server::testing::PlainSgd;
using ::ps::server::testing::Slice;
using ::ps::server::testing::StepRecords;
using ::ps::server::testing::VariedPush;

// A checkpoint's snapshot taken after step 3 was taken and before it was
// applied starts shard-0-3.wal restating step 3's pushes and step record,
// which shard-0-0.wal holds too; a kill in the next checkpoint's write then
// restores the checkpoint of version 0 and replays across both files (the
// layout a killed shard once refused with "replay reached version 44 but
// shard-1-43.wal starts at version 43"). The restated records are
// recognised, byte for byte, and replayed once.
TEST_F(CoordinatorLogTest, ReplaysAFileThatRestatesAStepTheOneBeforeApplied) {
  Shard a = Fresh(ConsistencyMode::kSync, Adam());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (uint64_t step = 0; step < 6; ++step) {
    for (int r : {1, 0}) {
      ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, r, step)).ok());
    }
  }
  const std::vector<std::string> all = Records(0);
  const auto [begin, end] = StepRecords(all, 3);
  ASSERT_EQ(end - begin, 3u);  // Two pushes and the step.
  WriteLog(0, Slice(all, 0, end));
  WriteLog(3, Slice(all, begin, all.size()));

  absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, Adam(), at0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->coordinator->version(), 6u);
  ExpectBitIdentical(AllWeights(*a.store), AllWeights(*b->store), "weights");
  EXPECT_EQ(b->coordinator->Snapshot().ranks, a.coordinator->Snapshot().ranks);
  EXPECT_NE(b->coordinator->Report().find(
                "updates lost in restarts: 0 (6 updates replayed"),
            std::string::npos)
      << b->coordinator->Report();
  const ShardReport fields = b->coordinator->ReportFields();
  EXPECT_EQ(fields.version, 6u);
  EXPECT_EQ(fields.updates_replayed, 6u);
  EXPECT_EQ(fields.updates_lost, 0u);
  EXPECT_EQ(fields.mode, "sync");
  EXPECT_EQ(fields.examples_per_epoch,
            a.coordinator->ReportFields().examples_per_epoch);
  EXPECT_FALSE(a.coordinator->ReportFields().updates_replayed.has_value());
  // It goes on appending to the newer file; a second restore replays both
  // again.
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(b->coordinator->Commit(VariedPush(*b->store, r, 6)).ok());
    ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, r, 6)).ok());
  }
  absl::StatusOr<Shard> c = Restored(ConsistencyMode::kSync, Adam(), at0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator->version(), 7u);
  ExpectBitIdentical(AllWeights(*a.store), AllWeights(*c->store), "step 6");
}

TEST_F(CoordinatorLogTest, RefusesARestatedPushThatDiffersFromTheOriginal) {
  Shard a = Fresh(ConsistencyMode::kSync, Adam());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (uint64_t step = 0; step < 5; ++step) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, r, step)).ok());
    }
  }
  const std::vector<std::string> all = Records(0);
  const auto [begin, end] = StepRecords(all, 3);
  WriteLog(0, Slice(all, 0, end));
  std::vector<std::string> restated = Slice(all, begin, all.size());
  absl::StatusOr<update::LogRecord> push = update::DecodeLogRecord(restated[1]);
  ASSERT_TRUE(push.ok());
  std::get<update::LoggedPush>(*push).gradients[0][0] += 1.0f;
  restated[1] = update::EncodeLogRecord(*push);
  WriteLog(3, restated);

  absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, Adam(), at0);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(b.status().message().find(
                "but its record 2 is not the push record of step 3"),
            std::string::npos)
      << b.status();
}

TEST_F(CoordinatorLogTest, RefusesFilesThatMissOrRepeatAStepUnstated) {
  Shard a = Fresh(ConsistencyMode::kSync, PlainSgd());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (uint64_t step = 0; step < 6; ++step) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(
          a.coordinator->Commit(ConstantPush(*a.store, r, step, 1.0f)).ok());
    }
  }
  const std::vector<std::string> all = Records(0);
  const size_t end2 = StepRecords(all, 2).second;
  const size_t end3 = StepRecords(all, 3).second;
  const size_t begin4 = StepRecords(all, 4).first;
  ASSERT_EQ(end3, begin4);
  struct Case {
    std::string what;
    size_t old_end;  // The old file holds all[0, old_end).
    uint64_t start;  // The new file starts at `start` holding all[end3...].
    std::string error;
  };
  const std::vector<Case> cases = {
      {"step 3 in neither file", end2, 4,
       "replay reached version 3 at the end of "},
      {"step 3 applied by the old file, not restated by the new", end3, 3,
       "starts at version 3 but its record 1 is not the push record of step "
       "3"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::filesystem::remove_all(dir_);
    WriteLog(0, Slice(all, 0, c.old_end));
    WriteLog(c.start, Slice(all, end3, all.size()));
    absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, PlainSgd(), at0);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(b.status().message().find(c.error), std::string::npos)
        << b.status();
  }
}

// The pushes of a half-collected step, replayed, are restated in the next
// file in the order the log holds them, not by rank, so that a later replay
// across both files finds the same records.
TEST_F(CoordinatorLogTest, RestatesReplayedPushesInTheOrderLogged) {
  Shard a = Fresh(ConsistencyMode::kSync, Adam(), 3);
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (uint64_t step = 0; step < 2; ++step) {
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, r, step)).ok());
    }
  }
  for (int r : {2, 0}) {
    ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, r, 2)).ok());
  }
  {
    absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, Adam(), at0, 3);
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE(b->coordinator->SnapshotForCheckpoint().ok());
    EXPECT_EQ(*b->coordinator->Commit(VariedPush(*b->store, 1, 2)), 3u);
  }
  EXPECT_EQ(*a.coordinator->Commit(VariedPush(*a.store, 1, 2)), 3u);
  absl::StatusOr<Shard> c = Restored(ConsistencyMode::kSync, Adam(), at0, 3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator->version(), 3u);
  ExpectBitIdentical(AllWeights(*a.store), AllWeights(*c->store), "weights");
}

}  // namespace
}  // namespace ps::server
