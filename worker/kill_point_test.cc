#include "worker/kill_point.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

using ::testing::HasSubstr;

TEST(KillPointTest, EmptyNeverFires) {
  absl::StatusOr<KillPoint> point = KillPoint::Parse("");
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_FALSE(point->armed());
  EXPECT_FALSE(point->Matches(0, KillMoment::kDone));
  EXPECT_FALSE(point->Matches(0, KillMoment::kStep, 0));
}

TEST(KillPointTest, ParsesEachMoment) {
  absl::StatusOr<KillPoint> step = KillPoint::Parse("rank=1,at=step:20");
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(step->Matches(1, KillMoment::kStep, 20));
  EXPECT_FALSE(step->Matches(1, KillMoment::kStep, 19));
  EXPECT_FALSE(step->Matches(0, KillMoment::kStep, 20));
  EXPECT_FALSE(step->Matches(1, KillMoment::kUpload));
  EXPECT_EQ(step->ToString(), "rank 1 at step 20");

  absl::StatusOr<KillPoint> push = KillPoint::Parse("rank=1,at=push:20");
  ASSERT_TRUE(push.ok()) << push.status();
  EXPECT_TRUE(push->Matches(1, KillMoment::kPush, 20));
  EXPECT_FALSE(push->Matches(1, KillMoment::kStep, 20));
  EXPECT_EQ(push->ToString(), "rank 1 at push of step 20");

  absl::StatusOr<KillPoint> zero = KillPoint::Parse("at=step:0,rank=3");
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_TRUE(zero->Matches(3, KillMoment::kStep, 0));

  absl::StatusOr<KillPoint> upload =
      KillPoint::Parse("rank=0,at=upload,once=/tmp/x");
  ASSERT_TRUE(upload.ok()) << upload.status();
  EXPECT_TRUE(upload->Matches(0, KillMoment::kUpload));
  EXPECT_FALSE(upload->Matches(0, KillMoment::kDone));
  EXPECT_EQ(upload->ToString(), "rank 0 at upload, once");

  absl::StatusOr<KillPoint> done = KillPoint::Parse("rank=2,at=done");
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->Matches(2, KillMoment::kDone));
}

TEST(KillPointTest, RefusesMalformedValuesNamingTheFlag) {
  const struct {
    const char* text;
    const char* why;
  } cases[] = {
      {"rank=1", "at= missing"},
      {"at=done", "rank= missing"},
      {"rank=-1,at=done", "rank '-1' is not a number >= 0"},
      {"rank=+1,at=done", "rank '+1' is not a number >= 0"},
      {"rank=x,at=done", "rank 'x' is not a number >= 0"},
      {"rank=1,rank=2,at=done", "rank given twice"},
      {"rank=1,at=done,at=upload", "at given twice"},
      {"rank=1,at=step:", "step '' is not a number >= 0"},
      {"rank=1,at=step:-3", "step '-3' is not a number >= 0"},
      {"rank=1,at=step: 3", "step ' 3' is not a number >= 0"},
      {"rank=1,at=push:x", "step 'x' is not a number >= 0"},
      {"rank=1,at=later", "unknown moment 'later'"},
      {"rank=1,at=done,once=", "once needs a file path"},
      {"rank=1,at=done,once=a,once=b", "once given twice"},
      {"rank=1,at=done,when=now", "unknown key 'when'"},
      {"rank=1,,at=done", "'' is not KEY=VALUE"},
      {"rank=1;at=done", "rank '1;at=done' is not a number >= 0"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<KillPoint> point = KillPoint::Parse(c.text);
    ASSERT_EQ(point.status().code(), absl::StatusCode::kInvalidArgument)
        << c.text;
    EXPECT_THAT(point.status().message(),
                HasSubstr(absl::StrCat("--test_kill_self=", c.text, ": ")))
        << c.text;
    EXPECT_THAT(point.status().message(), HasSubstr(c.why)) << c.text;
  }
}

// Fires in a child process: SIGKILL the first time, and with once= not
// again once its file exists.
TEST(KillPointTest, FiresOnceWithItsFile) {
  const std::string once = ::ps::testing::UnusedTestPath("kill_point_once");
  absl::StatusOr<KillPoint> point =
      KillPoint::Parse(absl::StrCat("rank=1,at=step:5,once=", once));
  ASSERT_TRUE(point.ok()) << point.status();
  auto run_child = [&](uint64_t step) {
    const pid_t pid = fork();
    if (pid == 0) {
      point->FireIf(1, KillMoment::kStep, step);
      _exit(0);
    }
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    return status;
  };
  int status = run_child(4);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "not its step";
  EXPECT_NE(access(once.c_str(), F_OK), 0) << "created only when it fires";
  status = run_child(5);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_EQ(access(once.c_str(), F_OK), 0);
  status = run_child(5);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the second incarnation lives";
}

}  // namespace
}  // namespace ps::worker
