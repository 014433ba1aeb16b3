// The worker's local mode (--local: no servers, the servers' own optimizer
// code in the worker) trains exactly what one worker with one sync server
// trains: the same weights, bit for bit, so that the local baseline's
// figures compare like with like.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/model_file.h"
#include "common/model_spec.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"

namespace ps::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(300);

// Flags both runs share: the optimizer (SGD with momentum and weight
// decay, cosine schedule) and a short run.
const std::vector<std::string>& OptimizerFlags() {
  static const auto* flags = new std::vector<std::string>{
      "--momentum=0.9", "--weight_decay=0.0001", "--min_learning_rate=0.001"};
  return *flags;
}

TEST(LocalModeTest, TrainsWhatOneWorkerWithOneSyncServerTrains) {
  const std::string with_server = TempPath("with_server.model");
  const std::string local = TempPath("local.model");

  LaunchConfig config = SmallJob();
  config.num_servers = 1;
  config.num_workers = 1;
  config.mode = "sync";
  config.lr_schedule = "cosine";
  config.device = "cpu";
  config.save_model = with_server;
  config.extra_server_flags = OptimizerFlags();
  config.extra_worker_flags = {"--max_steps=30"};
  const ClusterResult cluster = RunCluster(config);
  ASSERT_TRUE(cluster.status.ok()) << cluster.status;

  SubprocessOptions options;
  options.argv = {RunfilePath("worker/worker"),
                  "--local",
                  "--device=cpu",
                  absl::StrCat("--batch_size=", config.batch_size),
                  "--epochs=1",
                  "--max_steps=30",
                  absl::StrCat("--optimizer=", config.optimizer),
                  absl::StrCat("--learning_rate=", config.learning_rate),
                  "--lr_schedule=cosine",
                  absl::StrCat("--save_model=", local)};
  options.argv.insert(options.argv.end(), OptimizerFlags().begin(),
                      OptimizerFlags().end());
  absl::StatusOr<std::unique_ptr<Subprocess>> worker =
      Subprocess::Start(std::move(options));
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::optional<ExitStatus> exit = (*worker)->WaitFor(kTimeout);
  ASSERT_TRUE(exit.has_value() && exit->success()) << (*worker)->LastLines(20);

  const ModelSpec model = MlpModelSpec({784, 256, 128, 10});
  absl::StatusOr<std::vector<std::vector<float>>> a =
      LoadModel(with_server, model);
  absl::StatusOr<std::vector<std::vector<float>>> b = LoadModel(local, model);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (size_t t = 0; t < model.tensors.size(); ++t) {
    SCOPED_TRACE(model.tensors[t].name);
    ASSERT_EQ((*a)[t].size(), (*b)[t].size());
    for (size_t i = 0; i < (*a)[t].size(); ++i) {
      // Bit for bit: the same code computed both.
      ASSERT_EQ((*a)[t][i], (*b)[t][i]) << "element " << i;
    }
  }
  // And it trained: the weights moved from their initial values.
  EXPECT_NE((*a)[3], std::vector<float>((*a)[3].size(), 0.0f));
}

}  // namespace
}  // namespace ps::testing
