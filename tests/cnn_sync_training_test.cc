// Sync equivalence for a convolutional network: 2 workers at batch 32 train
// like 1 worker at batch 64, each step within float32's rounding bound of
// the same step in exact arithmetic (tests/sync_equivalence.h,
// tests/exact_network_step.h). Real server and worker binaries on
// 127.0.0.1, real Fashion-MNIST data.

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
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
using ::ps::testing::SmallJob;
using ::ps::testing::SyncEquivalence;

constexpr const char* kModel = ::ps::testing::kSmallCnnModel;
constexpr int kSteps = 10;
constexpr int kBatch = 32;

// Beyond the MLP's kinks, max pooling may choose another element of a
// window within rounding of the maximum, and dropout must drop the same
// elements whichever worker runs an example; the bound counts the first in
// full, and the reference draws each example's mask from its place in the
// step's global batch, as the workers must.
TEST(CnnSyncTrainingTest, TwoWorkersTrainLikeOneWorkerWithTwiceTheBatch) {
  absl::StatusOr<worker::nn::ModelDescription> description =
      worker::nn::ModelDescription::Parse(kModel);
  ASSERT_TRUE(description.ok()) << description.status();
  SyncEquivalence check;
  check.model = kModel;
  check.spec = description->Spec(SmallJob().seed);
  check.steps = kSteps;
  check.batch_size = kBatch;
  // Some 2 weights, where one would already fail the check.
  check.mistake_share_outside = 0.001;
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
  ExpectTwoWorkersTrainLikeOne(check);
}

}  // namespace
}  // namespace ps
