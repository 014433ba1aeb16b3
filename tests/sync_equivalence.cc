#include "tests/sync_equivalence.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/model_file.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"

namespace ps::testing {
namespace {

// The examples each rank trains on at each of the first `steps` steps, as
// the workers shard them.
std::vector<std::vector<worker::Batch>> StepBatches(
    const worker::LabeledImages& train, int num_workers, int batch_size,
    int steps) {
  absl::StatusOr<worker::EpochSharder> sharder = worker::EpochSharder::Create(
      train.num_examples, num_workers, batch_size, SmallJob().seed);
  EXPECT_TRUE(sharder.ok()) << sharder.status();
  if (!sharder.ok()) return {};
  const worker::EpochPlan plan = sharder->PlanEpoch(0);
  std::vector<std::vector<worker::Batch>> batches(steps);
  for (int step = 0; step < steps; ++step) {
    batches[step].resize(num_workers);
    for (int rank = 0; rank < num_workers; ++rank) {
      absl::StatusOr<absl::Span<const uint32_t>> indices =
          plan.BatchIndices(step, rank);
      EXPECT_TRUE(indices.ok()) << indices.status();
      if (!indices.ok()) return {};
      const absl::Status gathered =
          worker::GatherBatch(train, *indices, &batches[step][rank]);
      EXPECT_TRUE(gathered.ok()) << gathered;
    }
  }
  return batches;
}

std::vector<std::vector<float>> InitialWeights(const ModelSpec& model) {
  std::vector<std::vector<float>> weights;
  for (size_t t = 0; t < model.tensors.size(); ++t) {
    weights.emplace_back(model.tensors[t].num_elements());
    InitializeSlice(model, t, 0, absl::MakeSpan(weights[t]));
  }
  return weights;
}

// The largest |w - exact| / bound over a tensor's elements.
double WorstRatio(const std::vector<float>& w, const std::vector<double>& exact,
                  const std::vector<double>& bound) {
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    worst = std::max(worst, std::abs(w[i] - exact[i]) / bound[i]);
  }
  return worst;
}

// The share of the model's elements that `wrong` puts outside `exact`'s
// bound.
double ShareOutside(const ExactStep& wrong, const ExactStep& exact) {
  int64_t outside = 0, total = 0;
  for (size_t t = 0; t < exact.weights.size(); ++t) {
    for (size_t i = 0; i < exact.weights[t].size(); ++i) {
      const double diff = std::abs(wrong.weights[t][i] - exact.weights[t][i]);
      outside += diff > exact.bound[t][i];
      ++total;
    }
  }
  return static_cast<double>(outside) / total;
}

}  // namespace

LaunchConfig PlainSgdJob(const std::string& model, int num_servers,
                         int num_workers, int batch_size, int max_steps,
                         const std::string& save_model) {
  LaunchConfig config = SmallJob();
  config.model = model;
  config.num_servers = num_servers;
  config.num_workers = num_workers;
  config.batch_size = batch_size;
  config.save_model = save_model;
  config.extra_worker_flags = {absl::StrCat("--max_steps=", max_steps)};
  config.lr_schedule = "constant";
  config.extra_server_flags = {"--momentum=0"};
  return config;
}

void ExpectTwoWorkersTrainLikeOne(const SyncEquivalence& check) {
  absl::StatusOr<worker::LabeledImages> train =
      worker::LoadFashionMnist(SmallJob().data_dir, worker::Split::kTrain);
  ASSERT_TRUE(train.ok()) << train.status();
  // The same examples make each step's global batch in either run.
  const std::vector<std::vector<worker::Batch>> batches =
      StepBatches(*train, 2, check.batch_size, check.steps);
  ASSERT_EQ(batches.size(), check.steps);
  const float learning_rate = SmallJob().learning_rate;
  const std::vector<std::pair<std::string, Aggregation>> mistakes = {
      {"the last rank's push dropped", Aggregation::kDropLastRank},
      {"rank 0's push counted twice", Aggregation::kFirstRankTwice},
      {"the ranks' means summed, not weighted", Aggregation::kSumOfRankMeans},
  };

  std::vector<SyncEquivalence::Run> runs = check.runs;
  if (runs.empty()) {
    runs = {{2, check.batch_size}, {1, 2 * check.batch_size}};
  }
  for (const SyncEquivalence::Run& run : runs) {
    const int workers = run.workers;
    const int batch = run.batch_size;
    const int replicas = workers / run.pipeline_stages;
    const std::string run_name =
        run.pipeline_stages == 1
            ? absl::StrCat(workers, "x", batch)
            : absl::StrCat(replicas, "x", batch, "_stages", run.pipeline_stages,
                           "_micro", run.micro_batches);
    std::vector<std::vector<float>> before = InitialWeights(check.spec);
    std::vector<double> run_worst(check.spec.tensors.size(), 0.0);
    for (int step = 1; step <= check.steps; ++step) {
      SCOPED_TRACE(absl::StrCat(run_name, ": ", workers, " worker(s) at batch ",
                                batch, ", step ", step));
      const std::string path =
          TempPath(absl::StrCat(run_name, "_step", step, ".model"));
      LaunchConfig job =
          PlainSgdJob(check.model, 2, workers, batch, step, path);
      job.mode = check.mode;
      job.pipeline_stages = run.pipeline_stages;
      job.micro_batches = run.micro_batches;
      job.extra_worker_flags.insert(job.extra_worker_flags.end(),
                                    check.worker_flags.begin(),
                                    check.worker_flags.end());
      const ClusterResult result = RunCluster(job);
      ASSERT_TRUE(result.status.ok()) << result.status;
      ASSERT_EQ(result.ExitCode(), 0);
      absl::StatusOr<std::vector<std::vector<float>>> after =
          LoadModel(path, check.spec);
      ASSERT_TRUE(after.ok()) << after.status();
      ASSERT_EQ(after->size(), before.size());

      const ExactStep exact =
          check.exact_step(before, learning_rate, step, batches[step - 1],
                           Aggregation::kWeightedMean);
      std::cout << run_name << " step " << step
                << ", worst |w - exact| / bound:";
      for (size_t t = 0; t < after->size(); ++t) {
        const double ratio =
            WorstRatio((*after)[t], exact.weights[t], exact.bound[t]);
        run_worst[t] = std::max(run_worst[t], ratio);
        std::cout << " " << ratio;
        EXPECT_LE(ratio, 1.0) << check.spec.tensors[t].name;
      }
      std::cout << "\n";
      if (replicas == 2) {
        for (const auto& [name, aggregation] : mistakes) {
          const double share =
              ShareOutside(check.exact_step(before, learning_rate, step,
                                            batches[step - 1], aggregation),
                           exact);
          std::cout << "  " << name << ": " << share
                    << " of the weights outside\n";
          EXPECT_GE(share, check.mistake_share_outside) << name;
        }
      }
      before = *std::move(after);
    }
    std::cout << run_name << ": worst |w - exact| / bound of " << check.steps
              << " steps:";
    for (size_t t = 0; t < run_worst.size(); ++t) {
      std::cout << " " << check.spec.tensors[t].name << " " << run_worst[t];
    }
    std::cout << ", overall "
              << *std::max_element(run_worst.begin(), run_worst.end()) << "\n";
  }
}

}  // namespace ps::testing
