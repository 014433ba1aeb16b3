// Multi-process tests of the all-reduce mode (--mode=allreduce): real
// coordinator and worker binaries on 127.0.0.1, real Fashion-MNIST data.
// The workers average their gradients over a Gloo ring and each applies the
// servers' update code (worker/allreduce_exchange.h).

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/model_spec.h"
#include "common/temp_dir_testing.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/exact_sgd_step.h"
#include "tests/sync_equivalence.h"
#include "worker/dataset.h"

namespace ps {
namespace {

using ::ps::testing::Aggregation;
using ::ps::testing::ExactSgdStep;
using ::ps::testing::ExpectTwoWorkersTrainLikeOne;
using ::ps::testing::LineWith;
using ::ps::testing::PlainSgdJob;
using ::ps::testing::ReadTestFile;
using ::ps::testing::RunCluster;
using ::ps::testing::SmallJob;
using ::ps::testing::SyncEquivalence;
using ::ps::testing::TempPath;

constexpr int kSteps = 25;
constexpr int kLayers[] = {784, 256, 128, 10};

void ExpectSucceeded(const ClusterResult& result) {
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.ExitCode(), 0);
}

LaunchConfig Job(const std::string& mode, int num_workers, int batch_size,
                 const std::string& save_model) {
  LaunchConfig config = PlainSgdJob(SmallJob().model, 2, num_workers,
                                    batch_size, kSteps, save_model);
  config.mode = mode;
  return config;
}

// As SyncTrainingTest's test of the same name (tests/sync_equivalence.h):
// each step of the ring of 2 at batch 32, and of the ring of 1 at batch 64,
// lands within what float32 rounding can do of the exact step. The bound
// holds for the ring as for a server: the ranks' shares of 32 make n_r g_r
// exact and the float sum of two terms rounds once, as the server's
// conversion of its double sum does (worker/allreduce_exchange.h); and the
// aggregation mistakes must still fall outside it.
TEST(AllreduceTrainingTest, TwoWorkersTrainLikeOneWorkerWithTwiceTheBatch) {
  SyncEquivalence check;
  check.model = SmallJob().model;
  check.spec = MlpModelSpec(kLayers, SmallJob().seed);
  check.steps = kSteps;
  check.batch_size = 32;
  check.mode = "allreduce";
  check.exact_step = [](const std::vector<std::vector<float>>& before,
                        float learning_rate, int /*step*/,
                        absl::Span<const worker::Batch> ranks,
                        Aggregation aggregation) {
    return ExactSgdStep(kLayers, before, learning_rate, ranks, aggregation);
  };
  ExpectTwoWorkersTrainLikeOne(check);
}

// Where the arithmetic allows it (2 ranks of 32), the ring applies the sync
// servers' bits: a user comparing the modes compares the communication,
// not the numbers. Adam, so that the optimizer state is exercised too.
TEST(AllreduceTrainingTest, TwoWorkersTrainTheSyncServersBits) {
  const std::string ring = TempPath("ring.model");
  const std::string servers = TempPath("servers.model");
  LaunchConfig config = Job("allreduce", 2, 32, ring);
  config.optimizer = "adam";
  config.learning_rate = 0.001;
  config.extra_server_flags.clear();
  ExpectSucceeded(RunCluster(config));
  config.mode = "sync";
  config.save_model = servers;
  ExpectSucceeded(RunCluster(config));
  const std::string a = ReadTestFile(ring);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == ReadTestFile(servers))
      << "the ring and the sync servers trained other bits";
}

// Three ranks: Gloo's ring sums each element in an order fixed by the
// ranks and the bucket, whatever the timing.
TEST(AllreduceTrainingTest, SameSeedGivesBitIdenticalWeights) {
  const std::string first = TempPath("first.model");
  const std::string second = TempPath("second.model");
  LaunchConfig config = Job("allreduce", 3, 32, first);
  config.optimizer = "adam";
  config.learning_rate = 0.001;
  config.extra_server_flags.clear();
  config.extra_worker_flags.push_back("--allreduce_bucket_kb=64");
  ExpectSucceeded(RunCluster(config));
  config.save_model = second;
  ExpectSucceeded(RunCluster(config));
  const std::string a = ReadTestFile(first);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == ReadTestFile(second)) << "two runs with seed 1 differ";
}

// The launcher's main job in this mode, cut short: no server starts, the
// workers form one ring, and the run ends with rank 0's accuracy.
TEST(AllreduceTrainingTest, LauncherRunsTheMainJobWithoutServers) {
  LaunchConfig config = SmallJob();
  config.mode = "allreduce";
  config.batch_size = 64;
  config.max_steps = 300;
  std::vector<std::string> lines;
  const ClusterResult result = RunCluster(config, &lines);
  ExpectSucceeded(result);
  ASSERT_TRUE(result.final_test_accuracy.has_value());
  EXPECT_GT(*result.final_test_accuracy, 0.7);
  EXPECT_NE(LineWith(lines, "all-reduce coordinator for 2 workers"), "");
  EXPECT_NE(LineWith(lines, "worker 1", "joined the all-reduce ring"), "");
  EXPECT_EQ(LineWith(lines, "registered with"), "");
}

}  // namespace
}  // namespace ps
