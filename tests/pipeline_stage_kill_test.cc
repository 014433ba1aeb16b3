// A pipeline stage killed with SIGKILL (issue 34), at every moment of a
// run that matters: the real launcher, server and worker binaries on
// 127.0.0.1, 2 replicas of 2 stages in sync mode with checkpoints. Each
// case kills one worker where --test_kill_self says (worker/kill_point.h:
// inside step N after its forward and backward, before its push; before
// rank 0 saves the model; after its done line), once, so that nothing
// depends on timing. The launcher restarts the killed stage and its
// neighbour, whose step failed on the closed link; both resume where
// their groups recorded them, train the step in flight again, and the job
// ends with the weights of a run that nobody disturbed, bit for bit. A
// stage killed after its done line has finished: nothing is restarted.
//
// Every case compares with one undisturbed run, made once per shard.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/sync_equivalence.h"

namespace ps {
namespace {

using ::ps::testing::LineWith;
using ::ps::testing::ReadTestFile;
using ::ps::testing::RunfilePath;
using ::ps::testing::TempPath;
using ::testing::Contains;
using ::testing::HasSubstr;

// Generous: only a hang reaches it.
constexpr absl::Duration kJobTimeout = absl::Seconds(600);
constexpr int kSteps = 30;
constexpr int kBatch = 32;

std::vector<std::string> JobFlags(const std::string& name,
                                  const std::string& kill) {
  std::vector<std::string> flags = {
      absl::StrCat("--worker_binary=", RunfilePath("worker/worker")),
      "--num_servers=1",
      "--num_workers=4",  // 2 replicas x 2 stages.
      "--pipeline_stages=2",
      "--micro_batches=2",
      absl::StrCat("--model=", ::ps::testing::kSmallCnnModel),
      absl::StrCat("--batch_size=", kBatch),
      "--epochs=1",
      absl::StrCat("--max_steps=", kSteps),
      "--optimizer=sgd",
      "--learning_rate=0.05",
      "--log_every=1",
      "--output=stream",
      "--restart_backoff=200ms",
      // The restarted stages rejoin long before the servers would go on
      // without them, however loaded the machine.
      "--server_flags=--checkpoint_every_steps=10 --worker_timeout=120s",
      absl::StrCat("--run_dir=", TempPath(name)),
      absl::StrCat("--save_model=", TempPath(name + ".model")),
  };
  if (!kill.empty()) {
    flags.push_back(absl::StrCat("--worker_flags=--test_kill_self=", kill,
                                 ",once=", TempPath(name + ".killed")));
  }
  return flags;
}

// The undisturbed run's saved model, made once per test process.
const std::string& UndisturbedModel() {
  static const std::string* const model = [] {
    const ::ps::testing::LauncherRun run =
        ::ps::testing::RunLauncher(JobFlags("undisturbed", ""), kJobTimeout);
    EXPECT_TRUE(run.exit.success()) << run.exit.ToString();
    return new std::string(ReadTestFile(TempPath("undisturbed.model")));
  }();
  return *model;
}

// The number after `prefix` in `line` (up to a non-digit), or -1.
int64_t NumberAfter(const std::string& line, absl::string_view prefix) {
  const size_t at = line.find(std::string(prefix));
  if (at == std::string::npos) return -1;
  const size_t start = at + prefix.size();
  size_t end = start;
  while (end < line.size() && absl::ascii_isdigit(line[end])) ++end;
  int64_t n = -1;
  if (!absl::SimpleAtoi(line.substr(start, end - start), &n)) return -1;
  return n;
}

// Where group `group`'s server (server s holds stage s's group) says the
// rejoined replica `replica` resumes, or -1. Server 0's lines come as it
// wrote them; the others' under their launcher name (its own log calls
// each group's server "server 0").
int64_t ResumedAt(const std::vector<std::string>& lines, int group,
                  int replica) {
  const std::string rejoined =
      absl::StrCat("] warning: worker ", replica, " rejoined");
  for (const std::string& line : lines) {
    if (!absl::StrContains(line, rejoined)) continue;
    const bool from_server_1 = absl::StartsWith(line, "[server 1] ");
    if (from_server_1 != (group == 1)) continue;
    return NumberAfter(line, "it resumes at step ");
  }
  return -1;
}

struct KillCase {
  std::string name;
  int rank = 0;  // Rank r runs stage r % 2 of replica r / 2.
  std::string at;
  // The killed rank's replica and stage groups record these next steps when
  // the two stages rejoin (killed stage's group first), -1: no restart.
  int64_t killed_resumes = -1;
  int64_t neighbour_resumes = -1;
  // The final weights are the undisturbed run's, bit for bit.
  bool same_weights = true;
};

class PipelineStageKillTest : public ::testing::TestWithParam<KillCase> {};

TEST_P(PipelineStageKillTest, TheJobRecoversToTheUndisturbedWeights) {
  const KillCase& c = GetParam();
  const std::string& want = UndisturbedModel();
  ASSERT_FALSE(want.empty());
  const ::ps::testing::LauncherRun run = ::ps::testing::RunLauncher(
      JobFlags(c.name, absl::StrCat("rank=", c.rank, ",at=", c.at)),
      kJobTimeout);
  EXPECT_TRUE(run.exit.success()) << run.exit.ToString();
  const std::vector<std::string>& lines = run.lines;
  const std::string killed_name = absl::StrCat("worker ", c.rank);
  EXPECT_THAT(LineWith(lines, absl::StrCat("[", killed_name, "] warning: "),
                       "--test_kill_self: killing this worker"),
              HasSubstr(absl::StrCat("rank ", c.rank)));

  if (c.killed_resumes < 0) {
    // Killed after its done line: finished, nothing restarted.
    EXPECT_THAT(lines, Contains(HasSubstr(absl::StrCat(
                           killed_name,
                           " killed by signal 9 (SIGKILL) after its done "
                           "line"))));
    EXPECT_THAT(lines, Contains("[launch] restarts: none (--max_restarts=3)"));
  } else {
    // The killed stage and its neighbour, whose call failed naming it.
    EXPECT_THAT(lines, Contains("[launch] restarts: 2 of --max_restarts=3"));
    EXPECT_THAT(
        LineWith(lines, absl::StrCat("[launch]   ", killed_name, " at ")),
        HasSubstr("killed by signal 9 (SIGKILL)"));
    const int neighbour = c.rank ^ 1;
    EXPECT_THAT(LineWith(lines, absl::StrCat("[worker ", neighbour,
                                             "] error: ABORTED")),
                HasSubstr(absl::StrCat("stage ", c.rank % 2, " (rank ", c.rank,
                                       ") failed, it died")));
    // Each rejoins its stage's group (server s for stage s) as the replica
    // it is, where the group recorded it; the two agree on the earlier.
    const int replica = c.rank / 2;
    EXPECT_EQ(ResumedAt(lines, c.rank % 2, replica), c.killed_resumes);
    EXPECT_EQ(ResumedAt(lines, neighbour % 2, replica), c.neighbour_resumes);
    EXPECT_THAT(lines, Contains("[server 0] updates lost in restarts: 0"));
    EXPECT_THAT(lines, Contains("[server 1] updates lost in restarts: 0"));
  }

  const std::string got = ReadTestFile(TempPath(c.name + ".model"));
  ASSERT_FALSE(got.empty()) << "no saved model";
  if (c.same_weights) {
    EXPECT_TRUE(got == want) << "the final weights differ from the "
                                "undisturbed run's";
  }
}

// Killed at the start of step N: its neighbour's step N fails before it
// pushed, both groups resume at N and step N is trained again from the
// same weights. At the upload moment every step was pushed: both resume
// at kSteps. Killed at its push of step N: its neighbour had its messages
// and pushed N (its group applied it, so it resumes at N + 1 and
// acknowledges the repeated push without applying it); the replica
// repeats step N, but the neighbour's stage now computes it from the
// weights after N, which its group alone keeps: the job recovers and ends
// with other weights (README, the fault table).
INSTANTIATE_TEST_SUITE_P(
    Moments, PipelineStageKillTest,
    ::testing::Values(
        KillCase{"last_stage_mid_run", 1, "step:12", 12, 12},
        KillCase{"first_stage_mid_run", 0, "step:12", 12, 12},
        KillCase{"first_stage_at_step_0", 0, "step:0", 0, 0},
        KillCase{"replica_stage_at_step_0", 2, "step:0", 0, 0},
        KillCase{"rank_0_before_the_upload", 0, "upload", kSteps, kSteps},
        KillCase{"last_stage_after_done", 1, "done", -1, -1},
        KillCase{"last_stage_at_its_push", 1, "push:12", 12, 13, false}),
    [](const ::testing::TestParamInfo<KillCase>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace ps
