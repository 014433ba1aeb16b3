#ifndef PS_WORKER_PREDICT_H_
#define PS_WORKER_PREDICT_H_

// Using a trained model outside training: the `predict` command's steps, as
// functions that tests call without the binary.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/idx_reader.h"
#include "worker/nn/model.h"
#include "worker/nn/model_description.h"

namespace ps::worker {

// Builds `description` on `backend` (batches of up to `max_batch`) and sets
// its weights from `model_file`, a file written by the worker's
// --save_model. InvalidArgument, naming the file and the description, if
// the file holds other tensors (names or shapes) than the description
// declares; the file's errors (NotFound, DataLoss, ...) otherwise.
// Ownership: the model borrows `backend`, which must outlive it.
absl::StatusOr<std::unique_ptr<nn::Model>> LoadTrainedModel(
    const nn::ModelDescription& description, const std::string& model_file,
    int max_batch, kernels::Backend* backend);

// Reads an IDX images file (gzipped or not; see idx_reader.h), normalized
// as training normalizes pixels. The result has no labels.
absl::StatusOr<LabeledImages> LoadIdxImages(const std::string& path);

// The class of each of `images.num_examples` examples. InvalidArgument if
// the images are not the size the model takes.
absl::StatusOr<std::vector<int>> Classify(nn::Model& model,
                                          const LabeledImages& images);

// The fraction of `data` (labelled) that `model` classifies correctly.
absl::StatusOr<double> Accuracy(nn::Model& model, const LabeledImages& data);

}  // namespace ps::worker

#endif  // PS_WORKER_PREDICT_H_
