#include "server/checkpointer.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

class CheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    policy_.dir = absl::StrCat(
        tmp != nullptr ? tmp : "/tmp", "/checkpointer_",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(policy_.dir);
    policy_.poll = absl::Milliseconds(5);
  }

  std::unique_ptr<Checkpointer> Start() {
    return std::make_unique<Checkpointer>(
        policy_,
        [this] {
          update::ShardCheckpoint c;
          c.identity = {7, 0, "async", 1};
          c.version = version_;
          c.ranks.resize(1);
          c.slices.push_back(update::SliceSnapshot{{1.0f, 2.0f}, version_, {}});
          return c;
        },
        [this] { return version_.load(); }, version_.load());
  }

  std::vector<std::string> Files() {
    return *update::ListCheckpoints(policy_.dir, 0);
  }
  std::string Path(uint64_t v) {
    return absl::StrCat(policy_.dir, "/", update::CheckpointFileName(0, v));
  }
  // Waits up to 10 s for the newest checkpoint to be of `version`.
  bool AwaitNewest(uint64_t version) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      std::vector<std::string> files = Files();
      if (!files.empty() && files[0] == Path(version)) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  CheckpointPolicy policy_;
  std::atomic<uint64_t> version_{0};
};

TEST_F(CheckpointerTest, WritesEveryNUpdatesKeepingTheNewestTwo) {
  policy_.every_updates = 5;
  policy_.every = absl::ZeroDuration();
  auto checkpointer = Start();
  version_ = 4;
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_TRUE(Files().empty());
  version_ = 5;
  ASSERT_TRUE(AwaitNewest(5));
  version_ = 12;
  ASSERT_TRUE(AwaitNewest(12));
  version_ = 18;
  ASSERT_TRUE(AwaitNewest(18));
  checkpointer.reset();  // Pruning follows the rename: let it finish.
  EXPECT_EQ(Files(), (std::vector<std::string>{Path(18), Path(12)}));
}

TEST_F(CheckpointerTest, ARequestWritesOneAtTheSameVersion) {
  policy_.every_updates = 0;
  policy_.every = absl::ZeroDuration();
  version_ = 3;
  auto checkpointer = Start();
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_TRUE(Files().empty());
  checkpointer->RequestSoon();
  ASSERT_TRUE(AwaitNewest(3));
  // Once: nothing more is due.
  std::filesystem::remove(Path(3));
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_TRUE(Files().empty());
}

TEST_F(CheckpointerTest, TimerWritesOnlyAfterTheVersionMoved) {
  policy_.every_updates = 0;
  policy_.every = absl::Milliseconds(30);
  version_ = 3;  // Restored at 3: nothing new to write.
  auto checkpointer = Start();
  absl::SleepFor(absl::Milliseconds(150));
  EXPECT_TRUE(Files().empty());
  version_ = 4;
  EXPECT_TRUE(AwaitNewest(4));
}

TEST_F(CheckpointerTest, WriteNowWritesWhateverTheTriggers) {
  policy_.every_updates = 0;
  policy_.every = absl::ZeroDuration();
  version_ = 9;
  auto checkpointer = Start();
  absl::StatusOr<std::string> path = checkpointer->WriteNow();
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, Path(9));
  EXPECT_EQ(Files(), std::vector<std::string>{Path(9)});
}

TEST_F(CheckpointerTest, TellsOfEachCheckpointWrittenAndNotOfFailures) {
  policy_.every_updates = 0;
  policy_.every = absl::ZeroDuration();
  std::vector<uint64_t> written;
  policy_.on_written = [&written](uint64_t version) {
    written.push_back(version);
  };
  version_ = 9;
  auto checkpointer = Start();
  ASSERT_TRUE(checkpointer->WriteNow().ok());
  version_ = 10;
  ASSERT_TRUE(checkpointer->WriteNow().ok());
  std::filesystem::remove_all(policy_.dir);
  std::ofstream(policy_.dir) << "a file where the directory should be";
  version_ = 11;
  EXPECT_FALSE(checkpointer->WriteNow().ok());
  checkpointer.reset();
  EXPECT_EQ(written, (std::vector<uint64_t>{9, 10}));
}

TEST_F(CheckpointerTest, AFailedWriteIsReportedAndNothingStops) {
  std::ofstream(policy_.dir) << "a file where the directory should be";
  policy_.every_updates = 1;
  auto checkpointer = Start();
  version_ = 1;
  absl::SleepFor(absl::Milliseconds(50));  // The loop fails and goes on.
  EXPECT_FALSE(checkpointer->WriteNow().ok());
  std::filesystem::remove(policy_.dir);
  version_ = 2;
  EXPECT_TRUE(AwaitNewest(2));
}

}  // namespace
}  // namespace ps::server
