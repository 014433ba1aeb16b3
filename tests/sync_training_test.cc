// Multi-process tests of synchronous training: real server and worker
// binaries on 127.0.0.1, real Fashion-MNIST data, a few dozen steps each.

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/model_spec.h"
#include "common/temp_dir_testing.h"
#include "common/wire_encoding.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/exact_sgd_step.h"
#include "tests/sync_equivalence.h"
#include "worker/dataset.h"

namespace ps {
namespace {

using ::ps::testing::Aggregation;
using ::ps::testing::ExactSgdStep;
using ::ps::testing::ExactStep;
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
// How much of the model an aggregation mistake must move outside the bound:
// some 235 weights, where one would already fail the check.
constexpr double kMistakeShareOutside = 0.001;

LaunchConfig Job(int num_servers, int num_workers, int batch_size,
                 const std::string& save_model) {
  return PlainSgdJob(SmallJob().model, num_servers, num_workers, batch_size,
                     kSteps, save_model);
}

void ExpectSucceeded(const ClusterResult& result) {
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.ExitCode(), 0);
}

// "2 workers at batch 32 train like 1 worker at batch 64", step by step:
// each step of each run must land within what float32 rounding can do of
// the same step in exact arithmetic (tests/exact_sgd_step.h), taken from the
// weights the run had before it. That holds on any CPU and BLAS kernel.
//
// The two runs cannot simply be compared after many steps under a fixed
// tolerance: once in a while a pre-activation lies within rounding of zero,
// the runs take opposite sides of its ReLU, and that unit's gradient for
// that example differs in full. A bound that allows for such units stays
// tight for one step only, so the test checks every step from the run's own
// weights: a sync run is bit-identical up to step t - 1 whether it stops
// there or at t. The aggregation mistakes a server could make must fall
// outside the bound at every step, or the check would prove nothing.
TEST(SyncTrainingTest, TwoWorkersTrainLikeOneWorkerWithTwiceTheBatch) {
  SyncEquivalence check;
  check.model = SmallJob().model;
  check.spec = MlpModelSpec(kLayers, SmallJob().seed);
  check.steps = kSteps;
  check.batch_size = 32;
  check.mistake_share_outside = kMistakeShareOutside;
  check.exact_step = [](const std::vector<std::vector<float>>& before,
                        float learning_rate, int /*step*/,
                        absl::Span<const worker::Batch> ranks,
                        Aggregation aggregation) {
    return ExactSgdStep(kLayers, before, learning_rate, ranks, aggregation);
  };
  ExpectTwoWorkersTrainLikeOne(check);
}

// With bfloat16 on the wire both ways, a step is the exact step from the
// weights the workers pulled (the servers' rounded to bfloat16), applied to
// the servers' float32 weights, from gradients each rounded to bfloat16 on
// the way: within the float32 bound of that step plus the pushes' rounding,
// 2^-9 of each rank's share of the gradient (2^-8 here, for the rounding of
// values that carry float32 error already). The aggregation mistakes must
// still fall outside.
TEST(SyncTrainingTest, Bfloat16OnTheWireStaysWithinItsRoundingOfTheExactStep) {
  SyncEquivalence check;
  check.model = SmallJob().model;
  check.spec = MlpModelSpec(kLayers, SmallJob().seed);
  check.steps = 4;
  check.batch_size = 32;
  check.mistake_share_outside = kMistakeShareOutside;
  check.worker_flags = {"--compression=bf16"};
  check.exact_step = [](const std::vector<std::vector<float>>& before,
                        float learning_rate, int /*step*/,
                        absl::Span<const worker::Batch> ranks,
                        Aggregation aggregation) {
    std::vector<std::vector<float>> pulled = before;
    for (std::vector<float>& tensor : pulled) {
      for (float& w : tensor) w = RoundTrip(WireEncoding::kBfloat16, w);
    }
    ExactStep step =
        ExactSgdStep(kLayers, pulled, learning_rate, ranks, aggregation);
    size_t examples = 0;
    for (const worker::Batch& rank : ranks) examples += rank.labels.size();
    for (const worker::Batch& rank : ranks) {
      if (rank.labels.empty()) continue;
      // This rank's mean gradient: one step at rate 1 from the same weights.
      const ExactStep alone =
          ExactSgdStep(kLayers, pulled, 1.0f, absl::MakeConstSpan(&rank, 1),
                       Aggregation::kWeightedMean);
      const double share =
          static_cast<double>(rank.labels.size()) / examples * learning_rate;
      for (size_t t = 0; t < pulled.size(); ++t) {
        for (size_t i = 0; i < pulled[t].size(); ++i) {
          const double gradient = pulled[t][i] - alone.weights[t][i];
          step.bound[t][i] +=
              share * (std::fabs(gradient) + alone.bound[t][i]) * 0x1p-8;
        }
      }
    }
    for (size_t t = 0; t < pulled.size(); ++t) {
      for (size_t i = 0; i < pulled[t].size(); ++i) {
        // Applied to the servers' weights, not the pulled ones.
        step.weights[t][i] += double{before[t][i]} - pulled[t][i];
        step.bound[t][i] += std::fabs(before[t][i]) * 0x1p-24;
      }
    }
    return step;
  };
  ExpectTwoWorkersTrainLikeOne(check);
}

// Three workers at batch 32 with Adam, and `flags` for the workers.
LaunchConfig ThreeWorkerAdamJob(const std::vector<std::string>& flags) {
  LaunchConfig config = Job(2, 3, 32, "");
  config.optimizer = "adam";
  config.learning_rate = 0.001;
  config.extra_worker_flags.insert(config.extra_worker_flags.end(),
                                   flags.begin(), flags.end());
  return config;
}

// The model `config` trains, saved to `path`.
std::string TrainedModel(LaunchConfig config, const std::string& path) {
  config.save_model = path;
  ExpectSucceeded(RunCluster(config));
  return ReadTestFile(path);
}

// Compressed, a sync step still sums the ranks' (decoded) pushes in rank
// order, and top-k's error feedback is the workers' own deterministic
// state: reruns give the same bits.
TEST(SyncTrainingTest, CompressedRunsAreBitIdenticalToo) {
  const std::string plain =
      TrainedModel(ThreeWorkerAdamJob({}), TempPath("plain.model"));
  for (const char* flag : {"--compression=bf16", "--compression=topk"}) {
    SCOPED_TRACE(flag);
    const LaunchConfig config = ThreeWorkerAdamJob({flag, "--topk_ratio=0.05"});
    const std::string a = TrainedModel(config, TempPath("first_compressed"));
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == TrainedModel(config, TempPath("second_compressed")))
        << "two runs with seed 1 differ";
    EXPECT_FALSE(a == plain) << "compressed like float32";
  }
}

// Three workers: their pushes arrive in another order from run to run, and
// of three sums, unlike two, the order can change the bits.
TEST(SyncTrainingTest, SameSeedGivesBitIdenticalWeights) {
  const LaunchConfig config = ThreeWorkerAdamJob({});
  const std::string a = TrainedModel(config, TempPath("first.model"));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == TrainedModel(config, TempPath("second.model")))
      << "two runs with seed 1 differ";
}

// Workers on the servers' host reach them over the same-host transport
// unless told otherwise; gRPC must give the same bits (and so stay tested).
TEST(SyncTrainingTest, GrpcAndTheSameHostTransportTrainTheSameBits) {
  const std::string local = TempPath("local.model");
  const std::string grpc = TempPath("grpc.model");
  LaunchConfig config = Job(2, 2, 32, local);
  std::vector<std::string> lines;
  ExpectSucceeded(RunCluster(config, &lines));
  // Each server served each worker's steps over its Unix socket.
  EXPECT_NE(LineWith(lines, "server 0", "same-host transport served"), "");
  EXPECT_EQ(LineWith(lines, "same-host transport served 0 calls"), "");
  config.save_model = grpc;
  config.extra_worker_flags.push_back("--nolocal_transport");
  lines.clear();
  ExpectSucceeded(RunCluster(config, &lines));
  EXPECT_NE(LineWith(lines, "server 0", "same-host transport served 0 calls"),
            "");
  EXPECT_NE(LineWith(lines, "server 1", "same-host transport served 0 calls"),
            "");
  const std::string a = ReadTestFile(local);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == ReadTestFile(grpc)) << "the transports trained other bits";
}

TEST(SyncTrainingTest, TrainingMovesWeightsAwayFromInitialization) {
  const std::string trained = TempPath("trained.model");
  const std::string initial = TempPath("initial.model");
  ExpectSucceeded(RunCluster(Job(1, 1, 32, trained)));
  LaunchConfig untrained = Job(1, 1, 32, initial);
  untrained.learning_rate = 1e-30;
  ExpectSucceeded(RunCluster(untrained));
  EXPECT_NE(ReadTestFile(trained), ReadTestFile(initial));
}

}  // namespace
}  // namespace ps
