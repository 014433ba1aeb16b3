// UpdateCoordinator's replay across update log files: each checkpoint
// starts a file at its version, between two updates (a step is logged and
// applied under the lock the snapshot takes), so a file goes on exactly
// where the one before it ended; the replay reads the files in order and
// refuses files that leave a gap or repeat a step.
#include <filesystem>
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
using ::ps::server::testing::StepRecord;
using ::ps::server::testing::VariedPush;

// The steps whose records `records` holds, in order.
std::vector<uint64_t> Steps(const std::vector<std::string>& records) {
  std::vector<uint64_t> steps;
  for (const std::string& record : records) {
    absl::StatusOr<update::LogRecord> r = update::DecodeLogRecord(record);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) break;
    if (const auto* s = std::get_if<update::LoggedStepMean>(&*r)) {
      steps.push_back(s->step);
    }
  }
  return steps;
}

// A checkpoint taken while step 3 is half collected starts shard-0-3.wal,
// which holds nothing of step 3 until it is applied: no record is restated
// in two files. A kill in the next checkpoint's write restores the
// checkpoint of version 0 and replays both files.
TEST_F(CoordinatorLogTest, ReplaysAcrossFilesEachStepOnce) {
  Shard a = Fresh(ConsistencyMode::kSync, Adam());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (uint64_t step = 0; step < 6; ++step) {
    ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, 1, step)).ok());
    if (step == 3) {
      ASSERT_TRUE(a.coordinator->SnapshotForCheckpoint().ok());
    }
    ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, 0, step)).ok());
  }
  EXPECT_EQ(Steps(Records(0)), (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(Steps(Records(3)), (std::vector<uint64_t>{3, 4, 5}));

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

TEST_F(CoordinatorLogTest, RefusesFilesThatMissOrRepeatAStep) {
  Shard a = Fresh(ConsistencyMode::kSync, PlainSgd());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (uint64_t step = 0; step < 6; ++step) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(
          a.coordinator->Commit(ConstantPush(*a.store, r, step, 1.0f)).ok());
    }
  }
  const std::vector<std::string> all = Records(0);
  const size_t step3 = StepRecord(all, 3);
  struct Case {
    std::string what;
    size_t old_end;  // The old file holds all[0, old_end).
    uint64_t start;  // The new file starts at `start` holding all[step3...].
    std::string error;
  };
  const std::vector<Case> cases = {
      {"step 2 in neither file", step3 - 1, 3,
       "replay reached version 2 at the end of "},
      {"step 3 in both files", step3 + 1, 3,
       "replay reached version 4 at the end of "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::filesystem::remove_all(dir_);
    WriteLog(0, Slice(all, 0, c.old_end));
    WriteLog(c.start, Slice(all, step3, all.size()));
    absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, PlainSgd(), at0);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(b.status().message().find(c.error), std::string::npos)
        << b.status();
    EXPECT_NE(b.status().message().find("shard-0-3.wal starts at version 3"),
              std::string::npos)
        << b.status();
  }
}

// A step's record that is not the next step is a gap, in one file too.
TEST_F(CoordinatorLogTest, RefusesAStepRecordOutOfOrder) {
  Shard a = Fresh(ConsistencyMode::kSync, PlainSgd());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (uint64_t step = 0; step < 3; ++step) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(
          a.coordinator->Commit(ConstantPush(*a.store, r, step, 1.0f)).ok());
    }
  }
  std::vector<std::string> all = Records(0);
  all.erase(all.begin() + StepRecord(all, 1));
  std::filesystem::remove_all(dir_);
  WriteLog(0, all);
  absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, PlainSgd(), at0);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(b.status().message().find(
                "update log gap: step 2 where the shard is at version 1"),
            std::string::npos)
      << b.status();
}

}  // namespace
}  // namespace ps::server
