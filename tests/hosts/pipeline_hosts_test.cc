// A pipelined job of our worker (issue 34) with its stages on different
// test hosts: the same `launch` on each host, one replica (R = 1), the
// links between stages on different hosts over TCP (each host's launcher
// reserves its listening stage's port and the rendezvous hands it to the
// next host, with the job's link secret), the link between stages on one
// host on its socket.
//
// - 2 stages on 2 hosts, and 3 stages on 2 hosts (stages 0 and 1 on host
//   0, stage 2 on host 1): the final weights are byte for byte those of
//   the same job on one host.
// - Stage 0 SIGKILLed mid-run on host 0: its neighbour on host 1 fails on
//   the closed link naming it, both launchers restart their stage, the
//   stages rejoin their groups, link again over TCP and the job finishes.
//
// Skips (saying why) where network namespaces cannot be made.

#include <signal.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/hosts/host_launcher.h"
#include "tests/hosts/skip_without_hosts.h"
#include "tests/hosts/test_hosts.h"

namespace ps::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

constexpr int64_t kGbit = 1000 * 1000 * 1000;
// Bounds a hang only.
constexpr absl::Duration kTimeout = absl::Seconds(400);

// The job: `stages` stages of one replica, a server per stage's group,
// `steps` steps of a small MLP (it splits into 3 stages), its run
// directory and saved model named `name`.
std::vector<std::string> JobFlags(int stages, int steps,
                                  const std::string& name) {
  return {
      "--num_servers=1",
      absl::StrCat("--num_workers=", stages),
      absl::StrCat("--pipeline_stages=", stages),
      "--micro_batches=2",
      "--model=784-64-32-10",
      "--batch_size=32",
      "--epochs=1",
      absl::StrCat("--max_steps=", steps),
      "--optimizer=sgd",
      "--learning_rate=0.05",
      "--device=cpu",
      "--log_every=5",
      "--output=stream",
      "--restart_backoff=200ms",
      "--server_flags=--checkpoint_every_steps=10 --worker_timeout=120s",
      absl::StrCat("--run_dir=", TempPath(name)),
      absl::StrCat("--save_model=", TempPath(name + ".model")),
  };
}

// Starts the job on every host of `hosts` (host 0 last: the others wait
// for its rendezvous), each with a run directory and model path of its own.
std::vector<std::unique_ptr<Subprocess>> StartOnHosts(const TestHosts& hosts,
                                                      int stages, int steps,
                                                      const std::string& name) {
  std::vector<std::unique_ptr<Subprocess>> launchers(hosts.size());
  for (int host = hosts.size() - 1; host >= 0; --host) {
    launchers[host] = StartHostLaunch(
        hosts, host,
        JobFlags(stages, steps, absl::StrCat(name, "-host", host)));
    if (launchers[host] == nullptr) return {};
  }
  return launchers;
}

class PipelineHostsTest : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_TEST_HOSTS(); }
};

TEST_F(PipelineHostsTest, StagesOnTwoHostsTrainTheOneHostJobsWeights) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(2, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;
  for (const int stages : {2, 3}) {
    SCOPED_TRACE(absl::StrCat(stages, " stages"));
    const std::string name = absl::StrCat("stages", stages);
    const LauncherRun one_host = RunLauncher(
        [&] {
          std::vector<std::string> flags =
              JobFlags(stages, 40, name + "-one-host");
          flags.push_back(
              absl::StrCat("--worker_binary=", RunfilePath("worker/worker")));
          return flags;
        }(),
        kTimeout);
    ASSERT_TRUE(one_host.exit.success()) << one_host.exit.ToString();

    std::vector<std::unique_ptr<Subprocess>> launchers =
        StartOnHosts(hosts, stages, 40, name);
    ASSERT_EQ(launchers.size(), 2u);
    ExpectLaunchersSucceed(launchers, kTimeout);
    // Host 0's last stage listens over TCP for host 1's first.
    const int listener = stages - 2;
    EXPECT_FALSE(LineWith(launchers[0]->OutputLines(),
                          absl::StrCat("stage links over TCP: rank ", listener,
                                       " listens at ", hosts.address(0), ":"))
                     .empty());
    EXPECT_FALSE(
        LineWith(launchers[1]->OutputLines(),
                 absl::StrCat("stage links over TCP: rank ", stages - 1,
                              " reaches ", hosts.address(0), ":"))
            .empty());
    // Rank 0, on host 0, saved the whole model.
    const std::string want = ReadTestFile(TempPath(name + "-one-host.model"));
    const std::string got = ReadTestFile(TempPath(name + "-host0.model"));
    ASSERT_FALSE(want.empty());
    EXPECT_TRUE(got == want)
        << "the weights differ from the same job's on one host";
  }
}

TEST_F(PipelineHostsTest, AnExtensionGoesOnFromEachHostsStageGroup) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(2, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;
  std::vector<std::unique_ptr<Subprocess>> launchers =
      StartOnHosts(hosts, 2, 20, "extended");
  ASSERT_EQ(launchers.size(), 2u);
  ExpectLaunchersSucceed(launchers, kTimeout);
  // Host h ran stage h and its group's server: its run directory holds
  // only that group's checkpoints, which the extension keeps and goes on
  // from.
  for (int host : {1, 0}) {
    launchers[host] = ContinueHostLauncher(
        hosts, host, host, 0, "extend",
        TempPath(absl::StrCat("extended-host", host)), {"--max_steps=30"});
    ASSERT_NE(launchers[host], nullptr);
  }
  ExpectLaunchersSucceed(launchers, kTimeout);
  for (int host : {0, 1}) {
    const std::string checkpoints =
        TempPath(absl::StrCat("extended-host", host, "/checkpoints"));
    EXPECT_TRUE(std::filesystem::exists(
        absl::StrCat(checkpoints, "/stage", host, "/before-segment-2")))
        << host;
    EXPECT_FALSE(
        std::filesystem::exists(absl::StrCat(checkpoints, "/stage", 1 - host)))
        << host;
  }
  // And trained the steps it added, from where the run had stopped.
  const std::vector<std::string> lines = launchers[0]->OutputLines();
  EXPECT_FALSE(LineWith(lines, "[worker 0] info: epoch 1/1 step 30/").empty());
  EXPECT_TRUE(LineWith(lines, "[worker 0] info: epoch 1/1 step 20/").empty());
}

TEST_F(PipelineHostsTest, AFirstStageKilledOnItsHostIsRestartedAndTheJobEnds) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(2, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;
  // Hundreds of steps after the kill: the job cannot end before it.
  std::vector<std::unique_ptr<Subprocess>> launchers =
      StartOnHosts(hosts, 2, 1000, "killed");
  ASSERT_EQ(launchers.size(), 2u);
  absl::StatusOr<std::string> started =
      launchers[0]->WaitForOutputLine("started worker 0 (pid", kTimeout);
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_TRUE(
      launchers[0]
          ->WaitForOutputLine("[worker 0] info: epoch 1/1 step 20/", kTimeout)
          .ok());
  // The hosts share this machine's process ids (only the network is apart).
  ASSERT_EQ(kill(PidInStartedLine(*started), SIGKILL), 0);
  ExpectLaunchersSucceed(launchers, kTimeout);

  const std::vector<std::string> host0 = launchers[0]->OutputLines();
  const std::vector<std::string> host1 = launchers[1]->OutputLines();
  EXPECT_THAT(LineWith(host0, "[launch]   worker 0 at "),
              HasSubstr("killed by signal 9 (SIGKILL)"));
  // Its neighbour, on the other host, failed naming it, and was restarted.
  EXPECT_THAT(LineWith(host1, "[worker 1] error: ABORTED"),
              HasSubstr("from stage 0 (rank 0) failed, it died"));
  EXPECT_THAT(host0, Contains("[launch] restarts: 1 of --max_restarts=3"));
  EXPECT_THAT(host1, Contains("[launch] restarts: 1 of --max_restarts=3"));
  // Both stages rejoined their groups and linked again over TCP; the job
  // trained to its end and rank 0 saved the model. (Not compared with an
  // undisturbed run's: when stage 0 dies after stage 1 pushed the step,
  // stage 1's group is a step ahead and the repeated step's gradients for
  // stage 0 come from its newer weights; 1 of 3 runs so differed.)
  EXPECT_FALSE(
      LineWith(host0, "[server 0] warning: worker 0 rejoined").empty());
  EXPECT_FALSE(LineWith(host1, "warning: worker 0 rejoined").empty());
  EXPECT_FALSE(ReadTestFile(TempPath("killed-host0.model")).empty());
}

}  // namespace
}  // namespace ps::testing
