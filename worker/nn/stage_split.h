#ifndef PS_WORKER_NN_STAGE_SPLIT_H_
#define PS_WORKER_NN_STAGE_SPLIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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
  // Floats per example this stage sends forward (its last layer's output);
  // the last stage's is the number of classes.
  int64_t output_size = 0;

  // "layers 0-6 (conv 32 3x3 pad 1 .. flatten), 74 KiB of parameters".
  std::string ToString(const ModelDescription& description) const;
};

// Splits `description`'s layers into `stages` contiguous, non-empty stages
// balanced by parameter bytes: the split minimises the largest stage's
// parameter bytes, and among splits that do, the floats sent between
// stages per example (a cut after a pooling layer rather than before it).
// Time is not measured: a layer's compute is taken to follow its
// parameters, which holds for dense layers and not for convolutions, whose
// cost grows with the image (bench/README.md has what that costs).
// InvalidArgument naming --pipeline_stages when stages < 1 or more than the
// layers.
absl::StatusOr<std::vector<StageRange>> SplitByParameterBytes(
    const ModelDescription& description, int stages);

}  // namespace ps::worker::nn

#endif  // PS_WORKER_NN_STAGE_SPLIT_H_
