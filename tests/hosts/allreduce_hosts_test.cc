// --mode=allreduce across test hosts: the same `launch` on each host, joined
// through host 0's rendezvous (deploy/local/multi_host_launch.h), host 0 also
// running the ring's coordinator; our worker and a paramserver.torch
// program each form one ring over the hosts' link. Skips (saying why) where
// network namespaces cannot be made.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/hosts/host_launcher.h"
#include "tests/hosts/skip_without_hosts.h"
#include "tests/hosts/test_hosts.h"

namespace ps::testing {
namespace {

constexpr int64_t kGbit = 1000 * 1000 * 1000;
// Bounds a hang only: each job takes seconds.
constexpr absl::Duration kTimeout = absl::Seconds(400);

// Host `host`'s launch of a program on the ring of every host in `hosts`
// (StartHostLauncher's flags are our worker's).
std::unique_ptr<Subprocess> StartProgramLauncher(
    const TestHosts& hosts, int host, const std::string& run_dir,
    std::vector<std::string> program) {
  std::vector<std::string> argv = {
      RunfilePath("deploy/local/launch"),
      absl::StrCat("--server_binary=", RunfilePath("server/server")),
      absl::StrCat("--num_hosts=", hosts.size()),
      absl::StrCat("--host_index=", host),
      absl::StrCat("--rendezvous=", Rendezvous(hosts)),
      "--num_workers=2",
      "--mode=allreduce",
      "--output=stream",
      absl::StrCat("--run_dir=", run_dir),
      "--"};
  argv.insert(argv.end(), program.begin(), program.end());
  SubprocessOptions options =
      TestProcessOptions(absl::StrCat("host ", host), std::move(argv));
  options.output_drain_timeout = absl::Seconds(30);
  // The package and the program's modules, for the program.
  options.env = {{"PYTHONPATH", absl::StrCat(RunfilePath("python/site"), ":",
                                             RunfilePath("tests"))},
                 {"OMP_NUM_THREADS", "1"},
                 // The modules are the source tree's, through runfiles.
                 {"PYTHONDONTWRITEBYTECODE", "1"}};
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      hosts.Start(host, std::move(options));
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : nullptr;
}

// Runs `extra` on every host (host 0 last: the others wait for its
// rendezvous) and expects each launch to succeed; the launchers, exited.
// With `program`, that program in place of our worker.
std::vector<std::unique_ptr<Subprocess>> RunOnHosts(
    const TestHosts& hosts, const std::vector<std::string>& extra,
    const std::string& name, const std::vector<std::string>& program = {}) {
  std::vector<std::unique_ptr<Subprocess>> launchers(hosts.size());
  for (int host = hosts.size() - 1; host >= 0; --host) {
    const std::string run_dir = TempPath(absl::StrCat(name, "-host", host));
    launchers[host] = program.empty()
                          ? StartHostLauncher(hosts, host, run_dir, extra)
                          : StartProgramLauncher(hosts, host, run_dir, program);
    if (launchers[host] == nullptr) return {};
  }
  ExpectLaunchersSucceed(launchers, kTimeout);
  return launchers;
}

class AllreduceHostsTest : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_TEST_HOSTS(); }
};

TEST_F(AllreduceHostsTest, OurWorkersFormOneRingOverTwoHosts) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(2, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  std::vector<std::unique_ptr<Subprocess>> launchers =
      RunOnHosts(**made, {"--mode=allreduce", "--max_steps=40"}, "ring");
  ASSERT_EQ(launchers.size(), 2u);
  // The coordinator on host 0 only, on its address; worker 1 on host 1.
  EXPECT_TRUE(launchers[0]
                  ->WaitForOutputLine(absl::StrCat("server 0 listening on ",
                                                   (*made)->address(0)),
                                      absl::ZeroDuration())
                  .ok());
  EXPECT_FALSE(launchers[1]
                   ->WaitForOutputLine("started server", absl::ZeroDuration())
                   .ok());
  EXPECT_TRUE(
      launchers[1]->WaitForOutputLine("[worker 1]", absl::ZeroDuration()).ok());
  EXPECT_TRUE(
      launchers[0]
          ->WaitForOutputLine("final test accuracy: 0.", absl::ZeroDuration())
          .ok());
}

TEST_F(AllreduceHostsTest, APyTorchProgramFormsOneRingOverTwoHosts) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(2, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const std::string out = TempPath("torch-ring");
  std::filesystem::create_directories(out);
  std::vector<std::unique_ptr<Subprocess>> launchers =
      RunOnHosts(**made, {}, "torch-ring",
                 {"/usr/bin/python3",
                  RunfilePath("tests/python_torch_allreduce_program.py"),
                  "equivalence", out, "sgd"});
  ASSERT_EQ(launchers.size(), 2u);
  // Each rank on its host trained every step of the program.
  EXPECT_TRUE(launchers[0]
                  ->WaitForOutputLine("[worker 0] RESULT {\"mode\": "
                                      "\"allreduce\", \"size\": 2, \"steps\": "
                                      "20",
                                      absl::ZeroDuration())
                  .ok());
  EXPECT_TRUE(launchers[1]
                  ->WaitForOutputLine("[worker 1] RESULT {\"mode\": "
                                      "\"allreduce\", \"size\": 2, \"steps\": "
                                      "20",
                                      absl::ZeroDuration())
                  .ok());
}

}  // namespace
}  // namespace ps::testing
