#include "tests/hosts/host_launcher.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"

namespace ps::testing {

std::string Rendezvous(const TestHosts& hosts) {
  return absl::StrCat(hosts.address(0), ":29400");
}

namespace {

// Output streamed with the prefix "host N".
std::unique_ptr<Subprocess> StartOnHost(const TestHosts& hosts, int host,
                                        std::vector<std::string> argv) {
  SubprocessOptions options =
      TestProcessOptions(absl::StrCat("host ", host), std::move(argv));
  options.output_drain_timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      hosts.Start(host, std::move(options));
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : nullptr;
}

// `launch` with our binaries, as host `host_index` of `hosts`, the
// rendezvous on test host `rendezvous_host`.
std::vector<std::string> LaunchArgv(const TestHosts& hosts, int host_index,
                                    int rendezvous_host) {
  return {
      RunfilePath("deploy/local/launch"),
      absl::StrCat("--server_binary=", RunfilePath("server/server")),
      absl::StrCat("--worker_binary=", RunfilePath("worker/worker")),
      absl::StrCat("--num_hosts=", hosts.size()),
      absl::StrCat("--host_index=", host_index),
      absl::StrCat("--rendezvous=", hosts.address(rendezvous_host), ":29400")};
}

}  // namespace

std::unique_ptr<Subprocess> StartHostLauncher(const TestHosts& hosts, int host,
                                              const std::string& run_dir,
                                              std::vector<std::string> extra) {
  std::vector<std::string> argv = LaunchArgv(hosts, host, 0);
  argv.insert(argv.end(),
              {"--num_workers=2", "--num_servers=2", "--epochs=1",
               "--batch_size=32", "--optimizer=sgd", "--learning_rate=0.05",
               "--device=cpu", "--log_every=20", "--output=stream",
               absl::StrCat("--run_dir=", run_dir)});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return StartOnHost(hosts, host, std::move(argv));
}

std::unique_ptr<Subprocess> StartHostLaunch(const TestHosts& hosts, int host,
                                            std::vector<std::string> flags) {
  std::vector<std::string> argv = LaunchArgv(hosts, host, 0);
  argv.insert(argv.end(), flags.begin(), flags.end());
  return StartOnHost(hosts, host, std::move(argv));
}

std::unique_ptr<Subprocess> ContinueHostLauncher(
    const TestHosts& hosts, int host, int host_index, int rendezvous_host,
    const std::string& how, const std::string& run_dir,
    std::vector<std::string> extra) {
  // The run's own flags come from its run.txt; only the placement is given.
  std::vector<std::string> argv =
      LaunchArgv(hosts, host_index, rendezvous_host);
  argv.insert(argv.end(),
              {"--output=stream", absl::StrCat("--", how, "=", run_dir)});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return StartOnHost(hosts, host, std::move(argv));
}

void ExpectLaunchersSucceed(
    const std::vector<std::unique_ptr<Subprocess>>& launchers,
    absl::Duration timeout) {
  for (size_t host = 0; host < launchers.size(); ++host) {
    const std::optional<ExitStatus> exit = launchers[host]->WaitFor(timeout);
    EXPECT_TRUE(exit.has_value()) << "host " << host << "'s launch still runs";
    if (exit.has_value()) {
      EXPECT_TRUE(exit->success())
          << "host " << host << "'s launch " << exit->ToString();
    }
  }
}

}  // namespace ps::testing
