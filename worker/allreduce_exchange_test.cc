#include "worker/allreduce_exchange.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "allreduce/compression.h"
#include "allreduce/gloo_group.h"
#include "allreduce/ring_testing.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

ModelSpec Model() {
  ModelSpec model;
  model.tensors.push_back(
      {"w", DType::kFloat32, {40, 30}, InitializerSpec::Constant(1)});
  model.tensors.push_back(
      {"b", DType::kFloat32, {30}, InitializerSpec::Constant(1)});
  return model;
}

std::unique_ptr<LocalExchange> MakeLocal() {
  absl::StatusOr<std::unique_ptr<LocalExchange>> local =
      LocalExchange::Create(Model(), OptimizerSpec::Sgd(0.5f), std::nullopt);
  EXPECT_TRUE(local.ok()) << local.status();
  (*local)->Declare(10);
  return *std::move(local);
}

// A gradient per tensor whose elements span many binades, so that sums in
// another order or precision change the bits.
TensorValues Gradient(int seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-12, 12);
  TensorValues gradient;
  for (const TensorSpec& tensor : Model().tensors) {
    gradient.emplace_back(tensor.num_elements());
    for (float& x : gradient.back()) {
      x = std::ldexp(mantissa(random), exponent(random));
    }
  }
  return gradient;
}

StepInfo Step(uint32_t num_examples) {
  StepInfo info;
  info.num_examples = num_examples;
  return info;
}

// Each of the ranks pushes Gradient(rank) for `examples[rank]` examples
// (backward order: the last tensor first), `steps` times; returns each
// rank's weights after.
std::vector<TensorValues> RunRing(
    const std::vector<uint32_t>& examples, int steps, size_t bucket_bytes,
    allreduce::Compression compression = allreduce::Compression::kNone) {
  const int size = static_cast<int>(examples.size());
  gloo::rendezvous::HashStore store;
  std::vector<TensorValues> weights(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      allreduce::GroupOptions options;
      options.rank = rank;
      options.size = size;
      options.hostname = "127.0.0.1";
      absl::StatusOr<std::unique_ptr<allreduce::GlooGroup>> group =
          allreduce::GlooGroup::Connect(options, store);
      ASSERT_TRUE(group.ok()) << group.status();
      AllreduceOptions allreduce;
      allreduce.bucket_bytes = bucket_bytes;
      allreduce.compression = compression;
      absl::StatusOr<std::unique_ptr<AllreduceExchange>> exchange =
          AllreduceExchange::Create(MakeLocal(), *std::move(group), allreduce);
      ASSERT_TRUE(exchange.ok()) << exchange.status();
      absl::StatusOr<Registration> registration = (*exchange)->Declare(10);
      ASSERT_TRUE(registration.ok()) << registration.status();
      EXPECT_EQ(registration->num_workers, size);
      const TensorValues gradient = Gradient(rank);
      for (int step = 0; step < steps; ++step) {
        std::unique_ptr<StepPush> push =
            (*exchange)->StartStep(Step(examples[rank]), true);
        ASSERT_TRUE(push->Send(1, gradient[1]).ok());
        ASSERT_TRUE(push->Send(0, gradient[0]).ok());
        absl::StatusOr<uint64_t> version = push->FinishWithPull(weights[rank]);
        ASSERT_TRUE(version.ok()) << version.status();
        EXPECT_EQ(*version, step + 1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return weights;
}

// What a sync server applies: sum_r n_r g_r in double, in rank order,
// divided once (update/gradient_mean.h), on one LocalExchange.
TensorValues ServerSteps(const std::vector<uint32_t>& examples, int steps) {
  std::unique_ptr<LocalExchange> local = MakeLocal();
  double total = 0;
  for (uint32_t n : examples) total += n;
  TensorValues mean = Gradient(0);
  for (size_t t = 0; t < mean.size(); ++t) {
    for (size_t i = 0; i < mean[t].size(); ++i) {
      double sum = 0;
      for (size_t r = 0; r < examples.size(); ++r) {
        sum += static_cast<double>(examples[r]) * Gradient(r)[t][i];
      }
      mean[t][i] = static_cast<float>(sum / total);
    }
  }
  for (int step = 0; step < steps; ++step) {
    std::unique_ptr<StepPush> push =
        local->StartStep(Step(static_cast<uint32_t>(total)), false);
    EXPECT_TRUE(push->Send(0, mean[0]).ok());
    EXPECT_TRUE(push->Send(1, mean[1]).ok());
    EXPECT_TRUE(push->Finish().ok());
  }
  TensorValues weights;
  EXPECT_TRUE(local->Pull(0, weights).ok());
  return weights;
}

bool SameBits(const TensorValues& a, const TensorValues& b) {
  if (a.size() != b.size()) return false;
  for (size_t t = 0; t < a.size(); ++t) {
    if (a[t].size() != b[t].size() ||
        std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(float))) {
      return false;
    }
  }
  return true;
}

TEST(AllreduceExchangeTest, TwoRanksOfThirtyTwoApplyTheSyncServersBits) {
  const std::vector<uint32_t> examples = {32, 32};
  const std::vector<TensorValues> weights = RunRing(examples, 3, 1024);
  EXPECT_TRUE(SameBits(weights[0], ServerSteps(examples, 3)));
  EXPECT_TRUE(SameBits(weights[1], weights[0]));
}

TEST(AllreduceExchangeTest, UnequalSharesAreWeightedByTheirExamples) {
  const std::vector<uint32_t> examples = {5, 3, 7};
  const std::vector<TensorValues> weights = RunRing(examples, 1, 1 << 20);
  const TensorValues server = ServerSteps(examples, 1);
  for (size_t t = 0; t < server.size(); ++t) {
    for (size_t i = 0; i < server[t].size(); ++i) {
      // A step moves a weight by lr * |mean gradient| <= 0.5 * 4096; the
      // float sums of 3 ranks differ from the double one by a few ulps of
      // the terms.
      EXPECT_NEAR(weights[0][t][i], server[t][i], 1e-3) << t << " " << i;
    }
  }
  EXPECT_TRUE(SameBits(weights[1], weights[0]));
  EXPECT_TRUE(SameBits(weights[2], weights[0]));
}

TEST(AllreduceExchangeTest, AnEmptyShareWeighsNothing) {
  const std::vector<TensorValues> weights = RunRing({32, 0}, 1, 1024);
  EXPECT_TRUE(SameBits(weights[0], ServerSteps({32, 0}, 1)));
}

TEST(AllreduceExchangeTest, RerunsGiveTheSameBits) {
  const std::vector<uint32_t> examples = {5, 3, 7};
  EXPECT_TRUE(
      SameBits(RunRing(examples, 2, 2048)[0], RunRing(examples, 2, 2048)[0]));
}

// fp16 buckets: one step's weights within lr * Fp16SumBound / total of the
// sync server's (plus a float rounding of each), the same on every rank and
// rerun; the step's example count stays exact (its own float bucket).
TEST(AllreduceExchangeTest, Fp16StepsStayWithinTheBound) {
  const std::vector<uint32_t> examples = {3, 1, 2};
  const auto fp16 = allreduce::Compression::kFp16;
  const std::vector<TensorValues> weights = RunRing(examples, 1, 1024, fp16);
  const TensorValues server = ServerSteps(examples, 1);
  double total = 0;
  for (uint32_t n : examples) total += n;
  bool differs = false;
  for (size_t t = 0; t < server.size(); ++t) {
    for (size_t i = 0; i < server[t].size(); ++i) {
      double abs_sum = 0;
      for (size_t r = 0; r < examples.size(); ++r) {
        abs_sum += examples[r] * std::fabs(Gradient(r)[t][i]);
      }
      const double bound =
          0.5 * allreduce::Fp16SumBound(abs_sum, examples.size()) / total +
          2 * std::fabs(server[t][i]) * 0x1p-24;
      ASSERT_LE(std::fabs(weights[0][t][i] - server[t][i]), bound)
          << t << " " << i;
      differs = differs || weights[0][t][i] != server[t][i];
    }
  }
  EXPECT_TRUE(differs) << "fp16 should change some bits";
  EXPECT_TRUE(SameBits(weights[1], weights[0]));
  EXPECT_TRUE(SameBits(weights[2], weights[0]));
  EXPECT_TRUE(SameBits(RunRing(examples, 1, 1024, fp16)[0], weights[0]));
}

TEST(GpuKeysTest, EveryRankGetsEveryKeyAndSharedGpusAreFound) {
  const std::vector<uint64_t> keys = {GpuKey("host-a", 0), GpuKey("host-a", 1),
                                      GpuKey("host-b", 0)};
  EXPECT_EQ(FirstSharedGpu(keys), std::nullopt);
  allreduce::RunRingInThreads(3, [&](allreduce::GlooGroup& group) {
    absl::StatusOr<std::vector<uint64_t>> gathered =
        GatherGpuKeys(group, keys[group.rank()]);
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    EXPECT_EQ(*gathered, keys);
  });
  EXPECT_EQ(FirstSharedGpu({GpuKey("host-a", 0), GpuKey("host-a", 1),
                            GpuKey("host-a", 0)}),
            std::make_pair(0, 2));
  EXPECT_LT(GpuKey("a-host-name-that-is-long", 16777215), uint64_t{1} << 48);
  EXPECT_NE(GpuKey("", 0), kNoGpuKey);
  EXPECT_EQ(WhyNotNccl(keys), "");
  EXPECT_EQ(WhyNotNccl({GpuKey("h", 0), kNoGpuKey}),
            "rank 1 cannot use NCCL (a CPU worker, or no NCCL there)");
  EXPECT_EQ(WhyNotNccl({GpuKey("h", 0), GpuKey("h", 0)}),
            "ranks 0 and 1 share one GPU, and NCCL needs a GPU per rank");
}

TEST(UseNcclTest, PicksTheLibraryForTheDevice) {
  const absl::Status ok = absl::OkStatus();
  const absl::Status missing =
      absl::FailedPreconditionError("cannot load libnccl.so.2");
  EXPECT_EQ(*UseNccl("auto", true, ok), true);
  EXPECT_EQ(*UseNccl("auto", false, ok), false);
  EXPECT_EQ(*UseNccl("auto", true, missing), false);
  EXPECT_EQ(*UseNccl("gloo", true, ok), false);
  EXPECT_EQ(*UseNccl("nccl", true, ok), true);
  EXPECT_TRUE(absl::IsInvalidArgument(UseNccl("nccl", false, ok).status()));
  const absl::Status refused = UseNccl("nccl", true, missing).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused));
  EXPECT_NE(refused.message().find("libnccl.so.2"), absl::string_view::npos);
  EXPECT_TRUE(absl::IsInvalidArgument(UseNccl("mpi", true, ok).status()));
}

TEST(AllreduceExchangeTest, RefusesUnknownTensors) {
  gloo::rendezvous::HashStore store;
  allreduce::GroupOptions options;
  options.hostname = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<allreduce::GlooGroup>> group =
      allreduce::GlooGroup::Connect(options, store);
  ASSERT_TRUE(group.ok());
  absl::StatusOr<std::unique_ptr<AllreduceExchange>> exchange =
      AllreduceExchange::Create(MakeLocal(), *std::move(group),
                                AllreduceOptions());
  ASSERT_TRUE(exchange.ok());
  std::unique_ptr<StepPush> push = (*exchange)->StartStep(Step(1), false);
  // Id 2 is the exchange's own step record, not the caller's.
  EXPECT_TRUE(absl::IsInvalidArgument(push->Send(2, std::vector<float>{1})));
  EXPECT_TRUE(
      absl::IsInvalidArgument(push->Send(0, std::vector<float>(3, 1.0f))));
}

}  // namespace
}  // namespace ps::worker
