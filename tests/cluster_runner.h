#ifndef PS_TESTS_CLUSTER_RUNNER_H_
#define PS_TESTS_CLUSTER_RUNNER_H_

#include <string>

#include "deploy/local/launch_config.h"
#include "deploy/local/local_cluster.h"

namespace ps::testing {

// Test-side entry to the local launcher: runs a whole job of the real
// server and worker binaries (from the test's runfiles) on 127.0.0.1 with
// ports picked at run time, streaming their output to the test log. Every
// process is stopped before it returns.
ClusterResult RunCluster(LaunchConfig config);

// The defaults tests start from: 2 servers, 2 workers, the real data, SGD
// with momentum, one epoch (tests cut it short with --max_steps), binaries
// from runfiles.
LaunchConfig SmallJob();

// A fresh path under the test's temporary directory.
std::string TempPath(const std::string& name);

// Path of a binary of this workspace in the test's runfiles, e.g.
// RunfilePath("server/server").
std::string RunfilePath(const std::string& workspace_relative);

}  // namespace ps::testing

#endif  // PS_TESTS_CLUSTER_RUNNER_H_
