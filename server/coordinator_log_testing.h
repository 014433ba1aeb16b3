#ifndef PS_SERVER_COORDINATOR_LOG_TESTING_H_
#define PS_SERVER_COORDINATOR_LOG_TESTING_H_

// The fixture of UpdateCoordinator's update log tests
// (coordinator_log_test.cc, coordinator_log_files_test.cc): shards made
// fresh or restored over one log directory, and the log files' records read
// and rewritten.

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "common/temp_dir_testing.h"
#include "gtest/gtest.h"
#include "server/coordinator_test_util.h"
#include "server/update_coordinator.h"
#include "update/checkpoint.h"
#include "update/shard_store.h"
#include "update/update_log.h"
#include "update/update_log_record.h"

namespace ps::server::testing {

class CoordinatorLogTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ps::testing::FreshTestDir("coordinator_log"); }

  CoordinatorOptions Options(ConsistencyMode mode, int num_workers = 2) {
    CoordinatorOptions o = FastOptions(mode, num_workers);
    o.update_log_dir = dir_;
    o.update_log_fsync = fsync_;
    if (!preallocate_) o.update_log_preallocate_bytes = 0;
    o.fast_forward_after_restart = true;  // As --restore sets it.
    return o;
  }

  // A shard as the server builds one: fresh (its log started) or restored
  // from `checkpoint` and its log replayed.
  struct Shard {
    std::unique_ptr<update::ShardStore> store;
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
  bool fsync_ = false;       // --update_log_fsync
  bool preallocate_ = true;  // false: --update_log_preallocate_mb=0
};

// The index in `records` of sync step `step`'s record (its mean).
inline size_t StepRecord(const std::vector<std::string>& records,
                         uint64_t step) {
  for (size_t i = 0; i < records.size(); ++i) {
    absl::StatusOr<update::LogRecord> r = update::DecodeLogRecord(records[i]);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) break;
    if (const auto* s = std::get_if<update::LoggedStepMean>(&*r);
        s != nullptr && s->step == step) {
      return i;
    }
  }
  ADD_FAILURE() << "no record of step " << step;
  return records.size();
}

inline std::vector<std::string> Slice(const std::vector<std::string>& records,
                                      size_t begin, size_t end) {
  return std::vector<std::string>(records.begin() + begin,
                                  records.begin() + end);
}

}  // namespace ps::server::testing

#endif  // PS_SERVER_COORDINATOR_LOG_TESTING_H_
