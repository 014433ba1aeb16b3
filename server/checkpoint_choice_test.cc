#include "server/checkpoint_choice.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "common/status_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_config_testing.h"

namespace ps::server {
namespace {

using ::ps::update::LoadedCheckpoint;
using ::testing::HasSubstr;

// Shard 0 of 1, sync, 2 workers.
update::CheckpointIdentity Shard() { return {1, 0, "sync", 2}; }

update::ShardCheckpoint Checkpoint(const update::CheckpointIdentity& identity,
                                   uint64_t version, bool done) {
  update::ShardCheckpoint c;
  c.identity = identity;
  c.model.tensors.push_back(
      {"w", DType::kFloat32, {4}, InitializerSpec::Constant(0)});
  c.partition_fingerprint =
      Partition::Create(c.model, identity.num_servers)->fingerprint();
  c.version = version;
  c.planned_steps = 10;
  c.ranks.resize(identity.num_workers);
  for (update::RankRecord& r : c.ranks) r.done = done;
  c.slices = {update::SliceSnapshot{{1, 2, 3, 4}, version, {}}};
  return c;
}

class CheckpointChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir() + "/checkpoints";  // Not there yet.
  }

  std::string Write(const update::ShardCheckpoint& c) {
    absl::StatusOr<std::string> path = update::WriteCheckpoint(dir_, c, 10);
    EXPECT_TRUE(path.ok()) << path.status();
    return path.value_or("");
  }

  absl::StatusOr<std::optional<LoadedCheckpoint>> Choose(RestoreMode mode) {
    return ChooseCheckpoint(dir_, Shard(), mode);
  }

  std::string dir_;
};

TEST_F(CheckpointChoiceTest, AFreshStartCreatesTheDirectoryAndLeavesItEmpty) {
  absl::StatusOr<std::optional<LoadedCheckpoint>> chosen =
      Choose(RestoreMode::kNone);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_FALSE(chosen->has_value());
  ASSERT_TRUE(std::filesystem::is_directory(dir_));
  // The write probe is gone.
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(CheckpointChoiceTest, AFreshStartRefusesADirectoryHoldingTheShards) {
  // Another shard's checkpoints are no obstacle.
  update::CheckpointIdentity other = Shard();
  other.num_servers = 2;
  other.server_index = 1;
  Write(Checkpoint(other, 3, false));
  ASSERT_TRUE(Choose(RestoreMode::kNone).ok());

  const std::string path = Write(Checkpoint(Shard(), 3, false));
  const absl::Status s = Choose(RestoreMode::kNone).status();
  ps::testing::ExpectInvalid(s, absl::StrCat("--checkpoint_dir ", dir_,
                                             " holds checkpoints of shard 0 "
                                             "(newest ",
                                             path, "); pass --restore"));
}

TEST_F(CheckpointChoiceTest, RefusesADirectoryItCannotCreate) {
  ASSERT_TRUE(std::filesystem::create_directories(dir_));
  const std::string file = dir_ + "/file";
  std::ofstream(file) << "x";
  const absl::Status s =
      ChooseCheckpoint(file + "/sub", Shard(), RestoreMode::kRestore).status();
  ps::testing::ExpectInvalid(s, "--checkpoint_dir: cannot create");
}

TEST_F(CheckpointChoiceTest, RestoreStartsFreshWithoutACheckpoint) {
  absl::StatusOr<std::optional<LoadedCheckpoint>> chosen =
      Choose(RestoreMode::kRestore);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_FALSE(chosen->has_value());
}

TEST_F(CheckpointChoiceTest, RestoreTakesTheNewestReadableCheckpoint) {
  Write(Checkpoint(Shard(), 2, false));
  const std::string middle = Write(Checkpoint(Shard(), 5, false));
  const std::string newest = Write(Checkpoint(Shard(), 9, false));
  // The newest is cut short: the one before it is taken.
  std::filesystem::resize_file(newest, 10);
  absl::StatusOr<std::optional<LoadedCheckpoint>> chosen =
      Choose(RestoreMode::kRestore);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  ASSERT_TRUE(chosen->has_value());
  EXPECT_EQ((*chosen)->path, middle);
  EXPECT_EQ((*chosen)->checkpoint.version, 5u);
  ASSERT_EQ((*chosen)->skipped.size(), 1u);
  EXPECT_THAT((*chosen)->skipped[0], HasSubstr(newest));
}

TEST_F(CheckpointChoiceTest, RestoreRefusesAFinishedRun) {
  const std::string path = Write(Checkpoint(Shard(), 7, true));
  const absl::Status s = Choose(RestoreMode::kRestore).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat(path,
                                     " is of a finished run (every worker "
                                     "was done at version 7): pass --extend")));
}

TEST_F(CheckpointChoiceTest, RestoreRefusesAnotherRunsCheckpoint) {
  update::CheckpointIdentity other = Shard();
  other.mode = "async";
  Write(Checkpoint(other, 3, false));
  const absl::Status s = Choose(RestoreMode::kRestore).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

TEST_F(CheckpointChoiceTest, ExtendTakesAFinishedRunWithItsWorkersNotDone) {
  const std::string path = Write(Checkpoint(Shard(), 7, true));
  absl::StatusOr<std::optional<LoadedCheckpoint>> chosen =
      Choose(RestoreMode::kExtend);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  ASSERT_TRUE(chosen->has_value());
  EXPECT_EQ((*chosen)->path, path);
  ASSERT_EQ((*chosen)->checkpoint.ranks.size(), 2u);
  for (const update::RankRecord& r : (*chosen)->checkpoint.ranks) {
    EXPECT_FALSE(r.done);
  }
}

TEST_F(CheckpointChoiceTest, ExtendTakesARunNotFinishedAsItIs) {
  update::ShardCheckpoint c = Checkpoint(Shard(), 4, false);
  c.ranks[1].done = true;
  Write(c);
  absl::StatusOr<std::optional<LoadedCheckpoint>> chosen =
      Choose(RestoreMode::kExtend);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  ASSERT_TRUE(chosen->has_value());
  EXPECT_EQ((*chosen)->checkpoint.ranks, c.ranks);
}

TEST_F(CheckpointChoiceTest, ExtendNeedsACheckpoint) {
  const absl::Status s = Choose(RestoreMode::kExtend).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("--extend: ", dir_,
                                     " holds no checkpoint of shard 0, so "
                                     "there is no run to extend")));
}

}  // namespace
}  // namespace ps::server
