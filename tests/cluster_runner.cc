#include "tests/cluster_runner.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "deploy/local/cluster_output.h"
#include "deploy/local/line_writer.h"
#include "gtest/gtest.h"

namespace ps::testing {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

}  // namespace

std::string RunfilePath(const std::string& workspace_relative) {
  return absl::StrCat(EnvOr("TEST_SRCDIR", "."), "/",
                      EnvOr("TEST_WORKSPACE", "paramserver"), "/",
                      workspace_relative);
}

SubprocessOptions TestProcessOptions(const std::string& name,
                                     std::vector<std::string> argv) {
  SubprocessOptions options;
  options.argv = std::move(argv);
  options.name = name;
  options.kill_grace = absl::Seconds(2);
  const std::string prefix = absl::StrCat("[", name, "] ");
  options.line_callback = [prefix](absl::string_view line) {
    std::fprintf(stderr, "%s%.*s\n", prefix.c_str(),
                 static_cast<int>(line.size()), line.data());
  };
  return options;
}

std::string TempPath(const std::string& name) {
  return absl::StrCat(EnvOr("TEST_TMPDIR", "/tmp"), "/", name);
}

LaunchConfig SmallJob() {
  LaunchConfig config;
  config.server_binary = RunfilePath("server/server");
  config.worker_binary = RunfilePath("worker/worker");
  config.num_servers = 2;
  config.num_workers = 2;
  config.epochs = 1;
  config.batch_size = 32;
  config.optimizer = "sgd";
  config.learning_rate = 0.05;
  return config;
}

ClusterResult RunCluster(LaunchConfig config, std::vector<std::string>* lines) {
  std::function<void(absl::string_view)> to_stderr =
      LineWriter::FileSink(stderr);
  // The writer calls its sink under its lock: one line at a time.
  LineWriter writer([&](absl::string_view line) {
    to_stderr(line);
    if (lines != nullptr) lines->emplace_back(line);
  });
  StreamedOutput out(&writer);
  ClusterSpec spec = MakeClusterSpec(config);
  spec.temp_root = EnvOr("TEST_TMPDIR", "/tmp");
  LocalCluster cluster(std::move(spec), &out);
  return cluster.Run();
}

std::unique_ptr<Subprocess> StartLauncher(
    std::vector<std::string> args, absl::Duration timeout,
    std::vector<std::pair<std::string, std::string>> env) {
  SubprocessOptions options;
  options.argv = {
      RunfilePath("deploy/local/launch"),
      absl::StrCat("--server_binary=", RunfilePath("server/server"))};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.name = "launch";
  options.env = std::move(env);
  options.output_drain_timeout = timeout;
  // What the job did, in the test log, should the test fail.
  options.line_callback = [](absl::string_view line) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  };
  absl::StatusOr<std::unique_ptr<Subprocess>> launch =
      Subprocess::Start(std::move(options));
  EXPECT_TRUE(launch.ok()) << launch.status();
  return launch.ok() ? *std::move(launch) : nullptr;
}

LauncherRun RunLauncher(std::vector<std::string> args, absl::Duration timeout,
                        std::vector<std::pair<std::string, std::string>> env) {
  std::unique_ptr<Subprocess> launch =
      StartLauncher(std::move(args), timeout, std::move(env));
  if (launch == nullptr) return {ExitStatus::Exited(-1), {}};
  std::optional<ExitStatus> exit = launch->WaitFor(timeout);
  EXPECT_TRUE(exit.has_value()) << "the launcher did not finish";
  return {exit.value_or(ExitStatus::Exited(-1)), launch->OutputLines()};
}

int PidInStartedLine(const std::string& line) {
  const size_t at = line.find("(pid ");
  int pid = 0;
  if (at == std::string::npos ||
      !absl::SimpleAtoi(line.substr(at + 5, line.find(')', at) - at - 5),
                        &pid)) {
    ADD_FAILURE() << "no pid in: " << line;
    return 0;
  }
  return pid;
}

std::string LineWith(const std::vector<std::string>& lines,
                     absl::string_view text, absl::string_view also) {
  for (const std::string& line : lines) {
    if (absl::StrContains(line, text) && absl::StrContains(line, also)) {
      return line;
    }
  }
  return "";
}

}  // namespace ps::testing
