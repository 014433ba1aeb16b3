#ifndef PS_COMMON_MODEL_FILE_H_
#define PS_COMMON_MODEL_FILE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_spec.h"

namespace ps {

// A trained model on disk: a record file of kind "model" whose first record
// describes the tensors (names and shapes) and whose next records hold each
// tensor's float32 values, in model order.

// Writes `weights[tensor_id]` for every tensor of `model`, atomically.
absl::Status SaveModel(const std::string& path, const ModelSpec& model,
                       const std::vector<std::vector<float>>& weights);

// Reads a model file; `model` must describe the same tensors, or the file
// is refused (InvalidArgument naming the first difference).
absl::StatusOr<std::vector<std::vector<float>>> LoadModel(
    const std::string& path, const ModelSpec& model);

// A model file's contents, for a reader that does not know the model (the
// Python module). `model` holds the names and shapes only (initializers,
// weight decay and optimizer are not saved).
struct SavedModel {
  ModelSpec model;
  std::vector<std::vector<float>> weights;
};

// Reads any model file. DataLoss naming the file and what is malformed;
// NotFound for a missing file.
absl::StatusOr<SavedModel> ReadModel(const std::string& path);

}  // namespace ps

#endif  // PS_COMMON_MODEL_FILE_H_
