// Pipeline parallelism through the real binaries: a small CNN split into 2
// stages x 2 replicas trains like the unsplit 2-worker sync job. With one
// micro-batch the two compute the same floats, so they agree bit for bit
// at every step; with several, each step of both lands within float32's
// rounding bound of the same step in exact arithmetic
// (tests/sync_equivalence.h, tests/exact_network_step.h), which bounds
// how far apart they can be. The CNN is the one cnn_sync_training_test
// uses (every kind of layer of the cnn preset, 1,554 weights): the preset
// itself would make the exact double-precision reference and 4 workers on
// a 2-core machine too slow for a test.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/model_file.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/exact_network_step.h"
#include "tests/exact_sgd_step.h"
#include "tests/sync_equivalence.h"
#include "worker/dataset.h"
#include "worker/nn/model_description.h"

namespace ps {
namespace {

using ::ps::testing::Aggregation;
using ::ps::testing::ExactNetworkSgdStep;
using ::ps::testing::NetworkStep;
using ::ps::testing::PlainSgdJob;
using ::ps::testing::SmallJob;
using ::ps::testing::SyncEquivalence;

constexpr const char* kModel = ::ps::testing::kSmallCnnModel;
constexpr int kBatch = 32;

// The weights after `steps` steps of 2 replicas at kBatch, each of
// `stages` stages.
std::vector<std::vector<float>> Train(int stages, int micro_batches, int steps,
                                      const ModelSpec& spec,
                                      const std::string& schedule = "gpipe",
                                      const std::string& split = "bytes") {
  const std::string path = ::ps::testing::TempPath(
      absl::StrCat("stages", stages, "_micro", micro_batches, "_steps", steps,
                   "_", schedule, "_", split, ".model"));
  LaunchConfig job = PlainSgdJob(kModel, 2, 2 * stages, kBatch, steps, path);
  job.pipeline_stages = stages;
  job.micro_batches = micro_batches;
  job.pipeline_schedule = schedule;
  job.stage_split = split;
  const ClusterResult result = ::ps::testing::RunCluster(job);
  EXPECT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.ExitCode(), 0);
  absl::StatusOr<std::vector<std::vector<float>>> weights =
      LoadModel(path, spec);
  EXPECT_TRUE(weights.ok()) << weights.status();
  return weights.ok() ? *weights : std::vector<std::vector<float>>();
}

TEST(PipelineTrainingTest, OneMicroBatchTrainsBitForBitLikeTheUnsplitJob) {
  const ModelSpec spec =
      worker::nn::ModelDescription::Parse(kModel)->Spec(SmallJob().seed);
  for (int steps : {1, 3}) {
    SCOPED_TRACE(absl::StrCat(steps, " steps"));
    const std::vector<std::vector<float>> unsplit = Train(1, 1, steps, spec);
    const std::vector<std::vector<float>> pipelined = Train(2, 1, steps, spec);
    ASSERT_EQ(unsplit.size(), spec.tensors.size());
    ASSERT_EQ(pipelined.size(), spec.tensors.size());
    for (size_t t = 0; t < spec.tensors.size(); ++t) {
      EXPECT_EQ(pipelined[t], unsplit[t]) << spec.tensors[t].name;
    }
  }
}

TEST(PipelineTrainingTest, MicroBatchesTrainWithinTheFloatBoundOfTheExactStep) {
  absl::StatusOr<worker::nn::ModelDescription> description =
      worker::nn::ModelDescription::Parse(kModel);
  ASSERT_TRUE(description.ok()) << description.status();
  SyncEquivalence check;
  check.model = kModel;
  check.spec = description->Spec(SmallJob().seed);
  check.steps = 5;
  check.batch_size = kBatch;
  // The unsplit 2-worker job, then 2 replicas of 2 stages at 4
  // micro-batches of 8.
  check.runs = {{2, kBatch, 1, 1}, {4, kBatch, 2, 4}};
  check.exact_step = [&](const std::vector<std::vector<float>>& before,
                         float learning_rate, int step,
                         absl::Span<const worker::Batch> ranks,
                         Aggregation aggregation) {
    NetworkStep network_step;
    network_step.seed = SmallJob().seed;
    network_step.clock = step - 1;
    network_step.batch_size = kBatch;
    return ExactNetworkSgdStep(*description, network_step, before,
                               learning_rate, ranks, aggregation);
  };
  ::ps::testing::ExpectTwoWorkersTrainLikeOne(check);
}

// 1F1B runs the micro-batches' backwards in the other order and holds fewer
// of them; the step's gradient is the same bits (MicroBatchGradients), and
// so is every weight after a few steps. The compute split cuts elsewhere,
// which changes no float either.
TEST(PipelineTrainingTest, OneFOneBAndTheComputeSplitTrainBitForBitLikeGpipe) {
  const ModelSpec spec =
      worker::nn::ModelDescription::Parse(kModel)->Spec(SmallJob().seed);
  const std::vector<std::vector<float>> gpipe = Train(2, 4, 3, spec);
  const std::vector<std::vector<float>> one_f_one_b =
      Train(2, 4, 3, spec, "1f1b");
  const std::vector<std::vector<float>> by_compute =
      Train(2, 4, 3, spec, "1f1b", "compute");
  ASSERT_EQ(gpipe.size(), spec.tensors.size());
  ASSERT_EQ(one_f_one_b.size(), spec.tensors.size());
  ASSERT_EQ(by_compute.size(), spec.tensors.size());
  for (size_t t = 0; t < spec.tensors.size(); ++t) {
    EXPECT_EQ(one_f_one_b[t], gpipe[t]) << spec.tensors[t].name;
    EXPECT_EQ(by_compute[t], gpipe[t]) << spec.tensors[t].name;
  }
}

}  // namespace
}  // namespace ps
