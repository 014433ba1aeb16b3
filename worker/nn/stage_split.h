#ifndef PS_WORKER_NN_STAGE_SPLIT_H_
#define PS_WORKER_NN_STAGE_SPLIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/nn/model_description.h"

namespace ps::worker::nn {

// One pipeline stage: layers [first_layer, end_layer) of a description and
// the tensors they declare, [first_tensor, end_tensor) of its Spec(). The
// tensors keep the whole model's names (conv0.weight, fc1.bias, ...), which
// are distinct across stages, so the servers hold one model whatever the
// split, and a checkpoint or saved model is the unsplit one's.
struct StageRange {
  int first_layer = 0;
  int end_layer = 0;
  int first_tensor = 0;
  int end_tensor = 0;
  int64_t parameter_bytes = 0;
  // The layers' forward and backward floating-point operations per example
  // (LayerFlops).
  int64_t flops = 0;
  // Floats per example this stage sends forward (its last layer's output);
  // the last stage's is the number of classes.
  int64_t output_size = 0;

  // "layers 0-6 (conv 32 3x3 pad 1 .. flatten), 74 KiB of parameters,
  // 14.2 MFLOP per example".
  std::string ToString(const ModelDescription& description) const;
};

// What a split balances (--stage_split).
enum class StageSplitKind {
  kBytes,    // "bytes": SplitByParameterBytes.
  kCompute,  // "compute": SplitByCompute.
};
const char* StageSplitName(StageSplitKind kind);
// InvalidArgument naming --stage_split for a name other than the two.
absl::StatusOr<StageSplitKind> ParseStageSplit(absl::string_view name);

// Splits `description`'s layers into `stages` contiguous, non-empty stages
// balanced by parameter bytes: the split minimises the largest stage's
// parameter bytes, and among splits that do, the floats sent between
// stages per example (a cut after a pooling layer rather than before it).
// A layer's compute does not follow its parameters: a convolution's grows
// with its image (bench/README.md has what that costs).
// InvalidArgument naming --pipeline_stages when stages < 1 or more than the
// layers.
absl::StatusOr<std::vector<StageRange>> SplitByParameterBytes(
    const ModelDescription& description, int stages);

// The same, balancing each stage's forward and backward FLOPs instead of its
// parameter bytes (LayerFlops). They are counted from the description
// alone, so every rank computes the same split without talking; a layer's
// FLOPs are proportional to the batch, so the split does not depend on it.
absl::StatusOr<std::vector<StageRange>> SplitByCompute(
    const ModelDescription& description, int stages);

// SplitByParameterBytes or SplitByCompute.
absl::StatusOr<std::vector<StageRange>> SplitStages(
    const ModelDescription& description, int stages, StageSplitKind kind);

// Layer `layer`'s floating-point operations per example, forward and
// backward: a multiply-add counts 2; a convolution or dense layer does its
// forward's multiply-adds again for the weights' gradient and once more for
// its input's unless no trainable layer lies below it (the first stage's
// first trainable layer needs no input gradient); element-wise layers and
// pools one operation per element (per window element for pools) each way.
// Not measured: memory traffic, the loss, and the backend's efficiency per
// kind of layer are left out.
int64_t LayerFlops(const ModelDescription& description, int layer);

}  // namespace ps::worker::nn

#endif  // PS_WORKER_NN_STAGE_SPLIT_H_
