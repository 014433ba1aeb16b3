#include "tests/cluster_runner.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "deploy/local/cluster_output.h"
#include "deploy/local/line_writer.h"

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

ClusterResult RunCluster(LaunchConfig config) {
  LineWriter writer(LineWriter::FileSink(stderr));
  StreamedOutput out(&writer);
  ClusterSpec spec = MakeClusterSpec(config);
  spec.temp_root = EnvOr("TEST_TMPDIR", "/tmp");
  LocalCluster cluster(std::move(spec), &out);
  return cluster.Run();
}

}  // namespace ps::testing
