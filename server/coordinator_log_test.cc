// UpdateCoordinator's update log: a shard restored from a checkpoint and
// its log is bit for bit the shard that died, in sync (a step half
// collected when it died is collected again) and async; a sync step is
// logged once, as its mean; torn tails are dropped, gaps and format-2 sync
// logs refused, and a failed append fails the step. Replays across files:
// coordinator_log_files_test.cc.
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"
#include "server/coordinator_log_testing.h"
#include "server/coordinator_test_util.h"
#include "server/update_coordinator.h"
#include "update/checkpoint.h"
#include "update/update_log.h"

namespace ps::server {
namespace {

// Sets the format version in the header of the log file at `path`,
// resealing the header's checksum (a log as an older server wrote it).
void SetLogFormat(const std::string& path, uint32_t format) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(file) << path;
  std::string header(32, '\0');
  file.read(header.data(), header.size());
  std::memcpy(header.data() + 4, &format, sizeof(format));  // Little-endian.
  const uint32_t crc = crc32c::Value(absl::string_view(header).substr(0, 28));
  std::memcpy(header.data() + 28, &crc, sizeof(crc));
  file.seekp(0);
  file.write(header.data(), header.size());
  ASSERT_TRUE(file) << path;
}

// While it lives, files of this process may not grow past `bytes`: a write
// beyond fails with EFBIG (SIGXFSZ ignored) instead of killing the test.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t bytes) {
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    EXPECT_EQ(getrlimit(RLIMIT_FSIZE, &previous_), 0);
    rlimit limit = previous_;
    limit.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() {
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &previous_), 0);
    std::signal(SIGXFSZ, previous_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit previous_{};
  void (*previous_handler_)(int) = nullptr;
};

using ::ps::server::testing::Adam;
using ::ps::server::testing::AllWeights;
using ::ps::server::testing::ConstantPush;
using ::ps::server::testing::CoordinatorLogTest;
using ::ps::server::testing::ExpectBitIdentical;
using ::ps::server::testing::ExpectShiftedBy;
using ::ps::server::testing::FastOptions;
using ::ps::server::testing::GradientValues;
using ::ps::server::testing::IncarnationOf;
using ::ps::server::testing::LogCapture;
using ::ps::server::testing::MakeStore;
using ::ps::server::testing::PlainSgd;
using ::ps::server::testing::RegisterAll;
using ::ps::server::testing::VariedPush;

TEST_F(CoordinatorLogTest, SyncRestoreIsBitIdenticalAndRedoesAHalfStep) {
  Shard a = Fresh(ConsistencyMode::kSync, Adam());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  update::ShardCheckpoint at2;
  for (uint64_t step = 0; step < 5; ++step) {
    ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, 1, step)).ok());
    // A checkpoint while step 2 is half collected: its push is in neither
    // the checkpoint nor a log until the step is applied.
    if (step == 2) at2 = *a.coordinator->SnapshotForCheckpoint();
    ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, 0, step)).ok());
  }
  // Step 5 half collected when the shard dies: rank 0's push was never
  // acknowledged (AwaitStepApplied).
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
  // The restored shard does not have rank 0's push of step 5: rank 0 pushes
  // it again, and rank 1's completes the step as on the shard that lived.
  absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, Adam(), at2);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b->coordinator->Commit(VariedPush(*b->store, 0, 5)), 5u);
  EXPECT_EQ(*b->coordinator->Commit(VariedPush(*b->store, 1, 5)), 6u);
  EXPECT_EQ(*a.coordinator->Commit(VariedPush(*a.store, 1, 5)), 6u);
  ExpectBitIdentical(AllWeights(*a.store), AllWeights(*b->store), "step 5");
  // Rank 0 retrying its push of step 5 is recognised as applied already.
  const auto before = AllWeights(*b->store);
  EXPECT_TRUE(b->coordinator->Commit(VariedPush(*b->store, 0, 5)).ok());
  ExpectBitIdentical(before, AllWeights(*b->store), "after the retry");
}

// The bytes a sync step costs the log: its mean once, where format 2
// logged every worker's push. Asserted from the records, on a shard large
// enough that the gradients, not the headers, make the bytes.
TEST_F(CoordinatorLogTest, ASyncStepIsLoggedOnceAsItsMean) {
  constexpr int kWorkers = 2;
  auto store = MakeStore({60, 40, 20}, Adam());
  auto coordinator = *UpdateCoordinator::Create(
      store.get(), Options(ConsistencyMode::kSync, kWorkers));
  ASSERT_TRUE(coordinator->StartFreshLog().ok());
  RegisterAll(*coordinator, kWorkers);
  ASSERT_TRUE(coordinator->SnapshotForCheckpoint().ok());
  uint64_t push_bytes = 0;  // What logging every push would write.
  for (uint64_t step = 0; step < 5; ++step) {
    for (int r = 0; r < kWorkers; ++r) {
      StagedPush push = VariedPush(*store, r, step);
      update::LoggedPush logged;
      logged.num_examples = push.num_examples;
      logged.gradients = GradientValues(push);
      push_bytes += update::kLogRecordPrefixBytes +
                    update::EncodeLogRecord(logged).size();
      ASSERT_TRUE(coordinator->Commit(std::move(push)).ok());
    }
  }
  uint64_t step_bytes = 0;
  int steps = 0;
  for (const std::string& record : Records(0)) {
    absl::StatusOr<update::LogRecord> r = update::DecodeLogRecord(record);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_FALSE(std::holds_alternative<update::LoggedPush>(*r));
    if (const auto* s = std::get_if<update::LoggedStepMean>(&*r)) {
      EXPECT_EQ(s->step, static_cast<uint64_t>(steps));
      EXPECT_EQ(s->parts.size(), static_cast<size_t>(kWorkers));
      ++steps;
      step_bytes += update::kLogRecordPrefixBytes + record.size();
    }
  }
  EXPECT_EQ(steps, 5);
  // 3260 floats a push: 26 KB a step as pushes, 13 KB as the mean.
  EXPECT_EQ(store->num_elements(), 3260u);
  EXPECT_LT(step_bytes, push_bytes / kWorkers + 5 * 100) << push_bytes;
  EXPECT_GT(step_bytes, 5 * store->num_elements() * sizeof(float));
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

// A format-2 log (every sync push logged, restated across files) is not
// replayed by a sync shard: refused, naming the file and the format. ssp
// and async records are format 3's, so such a log replays there.
TEST_F(CoordinatorLogTest, RefusesAFormat2LogInSyncByName) {
  for (ConsistencyMode mode :
       {ConsistencyMode::kSync, ConsistencyMode::kAsync}) {
    SCOPED_TRACE(ConsistencyModeName(mode));
    std::filesystem::remove_all(dir_);
    Shard a = Fresh(mode, PlainSgd());
    const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(
          a.coordinator->Commit(ConstantPush(*a.store, r, 0, 1.0f)).ok());
    }
    a.coordinator.reset();
    const std::string log = dir_ + "/" + update::UpdateLogFileName(0, 0);
    SetLogFormat(log, 2);
    absl::StatusOr<Shard> b = Restored(mode, PlainSgd(), at0);
    if (mode == ConsistencyMode::kAsync) {
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(b->coordinator->version(), 2u);
      ExpectBitIdentical(AllWeights(*a.store), AllWeights(*b->store), "");
      continue;
    }
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(b.status().message().find(
                  absl::StrCat(log, " is an update log of format 2")),
              std::string::npos)
        << b.status();
  }
}

// A failed append of a step's record applies nothing of the step: the
// step's pushes (waiting to be acknowledged) get the error, and so does
// every later update and wait; the log holds what was acknowledged.
TEST_F(CoordinatorLogTest, AFailedStepAppendFailsItsPushesAndLaterCalls) {
  preallocate_ = false;  // The file grows with each append.
  Shard a = Fresh(ConsistencyMode::kSync, Adam());
  const update::ShardCheckpoint at0 = *a.coordinator->SnapshotForCheckpoint();
  for (uint64_t step = 0; step < 2; ++step) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, r, step)).ok());
    }
  }
  const auto applied = AllWeights(*a.store);
  ASSERT_TRUE(a.coordinator->Commit(VariedPush(*a.store, 0, 2)).ok());
  absl::Status failed;
  {
    // The log file may not grow: the next append fails (EFBIG).
    FileSizeLimit limit(std::filesystem::file_size(
        dir_ + "/" + update::UpdateLogFileName(0, 0)));
    failed = a.coordinator->Commit(VariedPush(*a.store, 1, 2)).status();
  }
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_NE(failed.message().find("the update log failed at version 2"),
            std::string::npos)
      << failed;
  EXPECT_EQ(a.coordinator->version(), 2u);
  ExpectBitIdentical(applied, AllWeights(*a.store), "after the failed step");
  // Rank 0's push of step 2, waiting for its step, is refused.
  const absl::Status waited =
      a.coordinator
          ->AwaitStepApplied(0, IncarnationOf(0), 2, [] { return false; })
          .status();
  EXPECT_EQ(waited, failed);
  EXPECT_EQ(a.coordinator->Commit(VariedPush(*a.store, 0, 2)).status(), failed);
  EXPECT_EQ(
      a.coordinator->AwaitPull(1, IncarnationOf(1), 2, [] { return false; })
          .status(),
      failed);
  // The log holds steps 0 and 1 (the torn record is dropped).
  absl::StatusOr<Shard> b = Restored(ConsistencyMode::kSync, Adam(), at0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->coordinator->version(), 2u);
  ExpectBitIdentical(applied, AllWeights(*b->store), "restored");
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
    // Rank 1's push of step 4 was never acknowledged: pushed again. The
    // step is appended after the reopened file's valid bytes, synced.
    EXPECT_EQ(*b->coordinator->Commit(VariedPush(*b->store, 1, 4)), 4u);
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
