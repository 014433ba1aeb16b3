// UpdateCoordinator's update log: a shard restored from a checkpoint and
// its log is bit for bit the shard that died, in sync (with a step half
// collected) and async; torn tails are dropped and gaps refused.
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/temp_dir_testing.h"
#include "gtest/gtest.h"
#include "server/coordinator_test_util.h"
#include "server/update_coordinator.h"
#include "update/checkpoint.h"
#include "update/update_log.h"

namespace ps::server {
namespace {

using ::ps::server::testing::Adam;
using ::ps::server::testing::AllWeights;
using ::ps::server::testing::ConstantPush;
using ::ps::server::testing::ExpectBitIdentical;
using ::ps::server::testing::ExpectShiftedBy;
using ::ps::server::testing::FastOptions;
using ::ps::server::testing::GradientValues;
using ::ps::server::testing::LogCapture;
using ::ps::server::testing::MakeStore;
using ::ps::server::testing::PlainSgd;
using ::ps::server::testing::RegisterAll;
using ::ps::server::testing::SetGradientValues;
using ::ps::server::testing::VariedPush;
using ::ps::update::ShardStore;

class CoordinatorLogTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ps::testing::FreshTestDir("coordinator_log"); }

  CoordinatorOptions Options(ConsistencyMode mode, int num_workers = 2) {
    CoordinatorOptions o = FastOptions(mode, num_workers);
    o.update_log_dir = dir_;
    o.update_log_fsync = fsync_;
    o.fast_forward_after_restart = true;  // As --restore sets it.
    return o;
  }

  // A shard as the server builds one: fresh (its log started) or restored
  // from `checkpoint` and its log replayed.
  struct Shard {
    std::unique_ptr<ShardStore> store;
    std::unique_ptr<UpdateCoordinator> coordinator;
  };
  Shard Fresh(ConsistencyMode mode, const update::OptimizerConfig& opt,
              int num_workers = 2) {
    Shard s;
    s.store = MakeStore({6, 4, 2}, opt);
    s.coordinator =
        *UpdateCoordinator::Create(s.store.get(), Options(mode, num_workers));
    EXPECT_TRUE(s.coordinator->StartFreshLog().ok());
    RegisterAll(*s.coordinator, num_workers);
    return s;
  }
  absl::StatusOr<Shard> Restored(ConsistencyMode mode,
                                 const update::OptimizerConfig& opt,
                                 const update::ShardCheckpoint& checkpoint,
                                 int num_workers = 2) {
    Shard s;
    s.store = MakeStore({6, 4, 2}, opt);
    s.coordinator =
        *UpdateCoordinator::Create(s.store.get(), Options(mode, num_workers));
    if (absl::Status st = s.coordinator->Restore(checkpoint); !st.ok()) {
      return st;
    }
    absl::StatusOr<uint64_t> replayed = s.coordinator->ReplayLog();
    if (!replayed.ok()) return replayed.status();
    return s;
  }

  // The payloads of shard 0's log file that starts at `start`.
  std::vector<std::string> Records(uint64_t start) {
    absl::StatusOr<update::UpdateLogContents> contents = update::ReadUpdateLog(
        dir_ + "/" + update::UpdateLogFileName(0, start), 0);
    EXPECT_TRUE(contents.ok()) << contents.status();
    return contents.ok() ? contents->records : std::vector<std::string>();
  }
  // Writes shard 0's log file that starts at `start`, holding `records`.
  void WriteLog(uint64_t start, const std::vector<std::string>& records) {
    std::vector<update::LogEntry> entries;
    for (const std::string& r : records) {
      entries.push_back(update::MakeLogEntry(r));
    }
    std::vector<const update::LogEntry*> pointers;
    for (const update::LogEntry& e : entries) pointers.push_back(&e);
    ASSERT_TRUE(update::UpdateLogWriter::Create(dir_, 0, start, pointers,
                                                /*fsync=*/false)
                    .ok());
  }

  std::string dir_;
  bool fsync_ = false;  // --update_log_fsync
};

// Where the records of sync step `step` begin (its first push) and end
// (just after its step record) in `records`.
std::pair<size_t, size_t> StepRecords(const std::vector<std::string>& records,
                                      uint64_t step) {
  size_t begin = records.size();
  for (size_t i = 0; i < records.size(); ++i) {
    absl::StatusOr<update::LogRecord> r = update::DecodeLogRecord(records[i]);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) break;
    if (const auto* p = std::get_if<update::LoggedPush>(&*r);
        p != nullptr && p->step == step && begin == records.size()) {
      begin = i;
    }
    if (const auto* s = std::get_if<update::LoggedStep>(&*r);
        s != nullptr && s->step == step) {
      return {begin, i + 1};
    }
  }
  ADD_FAILURE() << "no record of step " << step;
  return {records.size(), records.size()};
}

std::vector<std::string> Slice(const std::vector<std::string>& records,
                               size_t begin, size_t end) {
  return std::vector<std::string>(records.begin() + begin,
                                  records.begin() + end);
}

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
  // The last append (push and apply record) cut short.
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
