// Multi-process tests of synchronous training: real server and worker
// binaries on 127.0.0.1, real Fashion-MNIST data, a few dozen steps each.

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_file.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"

namespace ps {
namespace {

using ::ps::testing::RunCluster;
using ::ps::testing::SmallJob;
using ::ps::testing::TempPath;

constexpr int kSteps = 25;

LaunchConfig Job(int num_servers, int num_workers, int batch_size,
                 const std::string& save_model) {
  LaunchConfig config = SmallJob();
  config.num_servers = num_servers;
  config.num_workers = num_workers;
  config.batch_size = batch_size;
  config.save_model = save_model;
  config.extra_worker_flags = {absl::StrCat("--max_steps=", kSteps)};
  return config;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::vector<float>> Load(const std::string& path) {
  absl::StatusOr<std::vector<std::vector<float>>> weights =
      LoadModel(path, MlpModelSpec({784, 256, 128, 10}));
  EXPECT_TRUE(weights.ok()) << weights.status();
  return weights.ok() ? *weights : std::vector<std::vector<float>>{};
}

void ExpectSucceeded(const ClusterResult& result) {
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.ExitCode(), 0);
}

TEST(SyncTrainingTest, TwoWorkersMatchOneWorkerWithTwiceTheBatch) {
  const std::string two = TempPath("two_workers.model");
  const std::string one = TempPath("one_worker.model");
  ExpectSucceeded(RunCluster(Job(2, 2, 32, two)));
  ExpectSucceeded(RunCluster(Job(2, 1, 64, one)));

  const std::vector<std::vector<float>> a = Load(two);
  const std::vector<std::vector<float>> b = Load(one);
  ASSERT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a[t].size(); ++i) {
      diff += (a[t][i] - b[t][i]) * double{a[t][i] - b[t][i]};
      norm += b[t][i] * double{b[t][i]};
    }
    const double relative = std::sqrt(diff / norm);
    EXPECT_LE(relative, 1e-5) << "tensor " << t;
    // The weights did move: the comparison is not between two initial states.
    EXPECT_GT(norm, 0);
  }
}

TEST(SyncTrainingTest, SameSeedGivesBitIdenticalWeights) {
  const std::string first = TempPath("first.model");
  const std::string second = TempPath("second.model");
  LaunchConfig config = Job(2, 2, 32, first);
  config.optimizer = "adam";
  config.learning_rate = 0.001;
  ExpectSucceeded(RunCluster(config));
  config.save_model = second;
  ExpectSucceeded(RunCluster(config));
  const std::string a = ReadBytes(first);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == ReadBytes(second)) << "two runs with seed 1 differ";
}

TEST(SyncTrainingTest, TrainingMovesWeightsAwayFromInitialization) {
  const std::string trained = TempPath("trained.model");
  const std::string initial = TempPath("initial.model");
  ExpectSucceeded(RunCluster(Job(1, 1, 32, trained)));
  LaunchConfig untrained = Job(1, 1, 32, initial);
  untrained.learning_rate = 1e-30;
  ExpectSucceeded(RunCluster(untrained));
  EXPECT_NE(ReadBytes(trained), ReadBytes(initial));
}

TEST(SyncTrainingTest, WorkerWithAnotherModelIsRefused) {
  LaunchConfig config = Job(2, 1, 32, "");
  config.extra_worker_flags.push_back("--model=784-100-10");
  // The launcher passes --model to both; override the worker's with a later
  // flag (absl takes the last occurrence).
  ClusterResult result = RunCluster(config);
  EXPECT_NE(result.ExitCode(), 0);
  EXPECT_FALSE(result.status.ok());
  EXPECT_NE(result.status.message().find("worker 0"), absl::string_view::npos)
      << result.status;
  EXPECT_NE(result.status.message().find("disagree on --model"),
            absl::string_view::npos)
      << result.status;
}

}  // namespace
}  // namespace ps
