#ifndef PS_TESTS_CLUSTER_RUNNER_H_
#define PS_TESTS_CLUSTER_RUNNER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "deploy/local/launch_config.h"
#include "deploy/local/local_cluster.h"

namespace ps::testing {

// Test-side entry to the local launcher: runs a whole job of the real
// server and worker binaries (from the test's runfiles) on 127.0.0.1 with
// ports picked at run time, streaming their output to the test log (and,
// unless null, to `lines`). Every process is stopped before it returns.
ClusterResult RunCluster(LaunchConfig config,
                         std::vector<std::string>* lines = nullptr);

// The defaults tests start from: 2 servers, 2 workers, the real data, SGD
// with momentum, one epoch (tests cut it short with --max_steps), binaries
// from runfiles.
LaunchConfig SmallJob();

// How a test starts one of its processes: `argv`, named `name`, each line
// it prints going to the test log prefixed "[name] ", 2 s between SIGTERM
// and SIGKILL when it is stopped.
SubprocessOptions TestProcessOptions(const std::string& name,
                                     std::vector<std::string> argv);

// A fresh path under the test's temporary directory.
std::string TempPath(const std::string& name);

// Path of a binary of this workspace in the test's runfiles, e.g.
// RunfilePath("server/server").
std::string RunfilePath(const std::string& workspace_relative);

// How the launcher process ended and every line it printed.
struct LauncherRun {
  ExitStatus exit;
  std::vector<std::string> lines;
};

// Starts the launcher binary (deploy/local/launch, with the runfiles'
// server) with `args` and `env` added to its environment; every line it
// prints also goes to the test log. Its output is read for up to `timeout`
// after it exits. Null, and a test failure, if it cannot start.
std::unique_ptr<Subprocess> StartLauncher(
    std::vector<std::string> args, absl::Duration timeout,
    std::vector<std::pair<std::string, std::string>> env = {});

// StartLauncher, then waits for it; a test failure if it cannot start or
// takes longer than `timeout` (it is then killed with everything it
// started).
LauncherRun RunLauncher(
    std::vector<std::string> args, absl::Duration timeout,
    std::vector<std::pair<std::string, std::string>> env = {});

// The pid in the launcher's "started worker 1 (pid 123): ..." line; a test
// failure and 0 if it has none.
int PidInStartedLine(const std::string& line);

// The first of `lines` that contains `text` and `also`, or "".
std::string LineWith(const std::vector<std::string>& lines,
                     absl::string_view text, absl::string_view also = "");

}  // namespace ps::testing

#endif  // PS_TESTS_CLUSTER_RUNNER_H_
