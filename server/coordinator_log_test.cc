// UpdateCoordinator's update log: a shard restored from a checkpoint and
// its log is bit for bit the shard that died, in sync (with a step half
// collected) and async; torn tails are dropped and gaps refused. Replays
// across files that restate records: coordinator_log_files_test.cc.
#include <filesystem>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/coordinator_log_testing.h"
#include "server/coordinator_test_util.h"
#include "server/update_coordinator.h"
#include "update/checkpoint.h"
#include "update/update_log.h"

namespace ps::server {
namespace {

using ::ps::server::testing::Adam;
using ::ps::server::testing::AllWeights;
using ::ps::server::testing::ConstantPush;
using ::ps::server::testing::CoordinatorLogTest;
using ::ps::server::testing::ExpectBitIdentical;
using ::ps::server::testing::ExpectShiftedBy;
using ::ps::server::testing::FastOptions;
using ::ps::server::testing::LogCapture;
using ::ps::server::testing::MakeStore;
using ::ps::server::testing::PlainSgd;
using ::ps::server::testing::RegisterAll;
using ::ps::server::testing::VariedPush;

TEST_F(CoordinatorLogTest, SyncRestoreIsBitIdenticalWithAHalfCollectedStep) {
  Shard a = Fresh(ConsistencyMode::kSync, Adam());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  update::ShardCheckpoint at2;
  for (uint64_t step = 0; step < 5; ++step) {
    ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, 1, step)).ok());
    // A checkpoint while step 2 is half collected: its push is restated in
    // the new log file.
    if (step == 2) at2 = *a.coordinator->SnapshotForCheckpoint();
    ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, 0, step)).ok());
  }
  // Step 5 half collected when the shard dies.
  ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, 0, 5)).ok());
  ASSERT_EQ(at2.version, 2u);
  ASSERT_EQ(a.coordinator->version(), 5u);

  for (const update::ShardCheckpoint* from :
       std::vector<const update::ShardCheckpoint*>{&at2, &at0}) {
    SCOPED_TRACE(absl::StrCat("restored from version ", from->version));
    absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, Adam(), *from);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->coordinator->version(), 5u);
    ExpectBitIdentical(AllWeights(*a.store), AllWeights(*b->store), "weights");
    EXPECT_EQ(b->coordinator->Snapshot().ranks,
              a.coordinator->Snapshot().ranks);
    EXPECT_NE(b->coordinator->Report().find(
                  absl::StrCat("updates lost in restarts: 0 (",
                               5 - from->version, " updates replayed")),
              std::string::npos)
        << b->coordinator->Report();
  }
  // The restored shard kept rank 0's push of step 5: rank 1's completes it.
  absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, Adam(), at2);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b->coordinator->Commit(VariedPush(*b->store, 1, 5)), 6u);
  EXPECT_EQ(*a.coordinator->Commit(VariedPush(*a.store, 1, 5)), 6u);
  ExpectBitIdentical(AllWeights(*a.store), AllWeights(*b->store), "step 5");
  // Rank 0 retrying its push of step 5 is recognised as applied already.
  const auto before = AllWeights(*b->store);
  EXPECT_TRUE(b->coordinator->Commit(VariedPush(*b->store, 0, 5)).ok());
  ExpectBitIdentical(before, AllWeights(*b->store), "after the retry");
}

TEST_F(CoordinatorLogTest, ASecondRestoreReplaysWhatTheFirstLogged) {
  Shard a = Fresh(ConsistencyMode::kSync, Adam());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (uint64_t step = 0; step < 3; ++step) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, r, step)).ok());
    }
  }
  {
    absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, Adam(), at0);
    ASSERT_TRUE(b.ok());
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(b->coordinator->Commit(VariedPush(*b->store, r, 3)).ok());
      ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, r, 3)).ok());
    }
  }
  absl::StatusOr<Shard> c = Restored(ConsistencyMode::kSync, Adam(), at0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator->version(), 4u);
  ExpectBitIdentical(AllWeights(*a.store), AllWeights(*c->store), "weights");
}

TEST_F(CoordinatorLogTest, AsyncRestoreKeepsEveryAcknowledgedPushOnce) {
  Shard a = Fresh(ConsistencyMode::kAsync, PlainSgd());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  const auto initial = AllWeights(*a.store);
  for (uint64_t step = 0; step < 6; ++step) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(
          a.coordinator->Commit(ConstantPush(*a.store, r, step, 0.25f)).ok());
    }
    if (step == 3) {
      ASSERT_TRUE(a.coordinator->SnapshotForCheckpoint().ok());
    }
  }
  absl::StatusOr<Shard> b = Restored(ConsistencyMode::kAsync, PlainSgd(), at0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->coordinator->version(), 12u);
  ExpectBitIdentical(AllWeights(*a.store), AllWeights(*b->store), "weights");
  // A worker retrying its last push after the restart: acknowledged, not
  // applied.
  EXPECT_EQ(*b->coordinator->Commit(ConstantPush(*b->store, 1, 5, 0.25f)), 12u);
  ExpectShiftedBy(initial, AllWeights(*b->store), 12 * 0.25f);
}

TEST_F(CoordinatorLogTest, DropsATornLastRecordAndAppendsAfterIt) {
  Shard a = Fresh(ConsistencyMode::kAsync, PlainSgd());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (uint64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(
        a.coordinator->Commit(ConstantPush(*a.store, 0, step, 0.5f)).ok());
  }
  const std::string log = dir_ + "/" + update::UpdateLogFileName(0, 0);
  // The last append (push and apply record) cut short. The shard stops
  // first: its preallocating thread would write zeros after the cut, which
  // are the record's own last bytes (a record that reads back whole is
  // whole).
  a.coordinator.reset();
  std::filesystem::resize_file(log, std::filesystem::file_size(log) - 3);
  LogCapture capture;
  absl::StatusOr<Shard> b = Restored(ConsistencyMode::kAsync, PlainSgd(), at0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->coordinator->version(), 2u);
  EXPECT_NE(capture.text().find("never acknowledged"), std::string::npos);
  // The worker's retry of the lost push is new here, and logged after the
  // cut.
  EXPECT_EQ(*b->coordinator->Commit(ConstantPush(*b->store, 0, 2, 0.5f)), 3u);
  absl::StatusOr<Shard> c = Restored(ConsistencyMode::kAsync, PlainSgd(), at0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator->version(), 3u);
  ExpectBitIdentical(AllWeights(*a.store), AllWeights(*c->store), "weights");
}

TEST_F(CoordinatorLogTest, RefusesALogThatDoesNotStartAtTheCheckpoint) {
  Shard a = Fresh(ConsistencyMode::kAsync, PlainSgd());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (uint64_t step = 0; step < 4; ++step) {
    ASSERT_TRUE(
        a.coordinator->Commit(ConstantPush(*a.store, 0, step, 0.5f)).ok());
    if (step == 1) {
      ASSERT_TRUE(a.coordinator->SnapshotForCheckpoint().ok());
    }
  }
  std::filesystem::remove(dir_ + "/" + update::UpdateLogFileName(0, 0));
  absl::StatusOr<Shard> b = Restored(ConsistencyMode::kAsync, PlainSgd(), at0);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(b.status().message().find("checkpoint holds version 0 but the "
                                      "update log resumes at version 2"),
            std::string::npos)
      << b.status();
}

TEST_F(CoordinatorLogTest, RefusesAStepWhosePushIsMissing) {
  Shard a = Fresh(ConsistencyMode::kSync, PlainSgd());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(a.coordinator->Commit(ConstantPush(*a.store, r, 0, 1.0f)).ok());
  }
  // Rewrite the log without rank 1's push.
  const std::string log = dir_ + "/" + update::UpdateLogFileName(0, 0);
  absl::StatusOr<update::UpdateLogContents> contents =
      update::ReadUpdateLog(log, 0);
  ASSERT_TRUE(contents.ok());
  std::vector<update::LogEntry> kept;
  for (const std::string& r : contents->records) {
    absl::StatusOr<update::LogRecord> record = update::DecodeLogRecord(r);
    ASSERT_TRUE(record.ok());
    const auto* push = std::get_if<update::LoggedPush>(&*record);
    if (push == nullptr || push->rank != 1) {
      kept.push_back(update::MakeLogEntry(r));
    }
  }
  std::vector<const update::LogEntry*> pointers;
  for (const auto& e : kept) pointers.push_back(&e);
  ASSERT_TRUE(
      update::UpdateLogWriter::Create(dir_, 0, 0, pointers, false).ok());
  absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, PlainSgd(), at0);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(b.status().message().find("step 0 sums worker 1's push, which is "
                                      "not in the log"),
            std::string::npos)
      << b.status();
}

// --update_log_fsync: every file created, appended to and reopened with
// fdatasync (and its directory synced) holds what it holds without.
TEST_F(CoordinatorLogTest, FsyncedLogReplaysTheSame) {
  fsync_ = true;
  Shard a = Fresh(ConsistencyMode::kSync, Adam());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (uint64_t step = 0; step < 4; ++step) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, r, step)).ok());
    }
    if (step == 1) {
      ASSERT_TRUE(a.coordinator->SnapshotForCheckpoint().ok());
    }
  }
  ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, 1, 4)).ok());
  {
    absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, Adam(), at0);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->coordinator->version(), 4u);
    ExpectBitIdentical(AllWeights(*a.store), AllWeights(*b->store), "weights");
    // Appended after the reopened file's valid bytes, synced.
    EXPECT_EQ(*b->coordinator->Commit(VariedPush(*b->store, 0, 4)), 5u);
  }
  EXPECT_EQ(*a.coordinator->Commit(VariedPush(*a.store, 0, 4)), 5u);
  fsync_ = false;  // Reads the same files without syncing.
  absl::StatusOr<Shard> c = Restored(ConsistencyMode::kSync, Adam(), at0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator->version(), 5u);
  ExpectBitIdentical(AllWeights(*a.store), AllWeights(*c->store), "step 4");
  for (const std::filesystem::directory_entry& e :
       std::filesystem::directory_iterator(dir_)) {
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  }
}

TEST_F(CoordinatorLogTest, WithoutALogTheReportSaysTheLossIsUnknown) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  CoordinatorOptions options = FastOptions(ConsistencyMode::kAsync, 2);
  auto a = *UpdateCoordinator::Create(store.get(), options);
  RegisterAll(*a, 2);
  EXPECT_NE(a->Report().find("updates lost in restarts: 0\n"),
            std::string::npos);
  const update::ShardCheckpoint taken = a->Snapshot();
  auto b_store = MakeStore({6, 4, 2}, PlainSgd());
  auto b = *UpdateCoordinator::Create(b_store.get(), options);
  ASSERT_TRUE(b->Restore(taken).ok());
  ASSERT_EQ(*b->ReplayLog(), 0u);
  EXPECT_NE(b->Report().find("updates lost in restarts: unknown: restored "
                             "from the checkpoint of version 0 without an "
                             "update log"),
            std::string::npos)
      << b->Report();
  EXPECT_EQ(a->ReportFields().updates_lost, 0u);
  EXPECT_FALSE(b->ReportFields().updates_lost.has_value());
  EXPECT_FALSE(b->ReportFields().updates_replayed.has_value());
}

}  // namespace
}  // namespace ps::server
