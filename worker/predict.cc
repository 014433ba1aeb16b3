#include "worker/predict.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/model_file.h"

namespace ps::worker {
namespace {

absl::Status CheckExampleSize(const nn::Model& model,
                              const LabeledImages& data) {
  if (data.example_size() != model.example_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the images have ", data.example_size(), " pixels (", data.rows, "x",
        data.cols, "), the model takes ", model.example_size(), " floats"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<nn::Model>> LoadTrainedModel(
    const nn::ModelDescription& description, const std::string& model_file,
    int max_batch, kernels::Backend* backend) {
  nn::ModelOptions options;
  options.max_batch = max_batch;
  absl::StatusOr<std::unique_ptr<nn::Model>> model =
      nn::CreateModel(description, options, backend);
  if (!model.ok()) return model.status();
  absl::StatusOr<std::vector<std::vector<float>>> weights =
      LoadModel(model_file, (*model)->spec());
  if (absl::IsInvalidArgument(weights.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat(weights.status().message(), "; the model given is \"",
                     description.ToString(),
                     "\": pass the --model the file was trained with"));
  }
  if (!weights.ok()) return weights.status();
  for (size_t t = 0; t < weights->size(); ++t) {
    absl::Status status =
        (*model)->SetWeights(static_cast<int>(t), (*weights)[t]);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat(model_file, ": ", status.message()));
    }
  }
  return std::move(*model);
}

absl::StatusOr<LabeledImages> LoadIdxImages(const std::string& path) {
  absl::StatusOr<IdxArray> idx = ReadIdxFile(path, kIdxImagesMagic);
  if (!idx.ok()) return idx.status();
  LabeledImages images;
  images.num_examples = idx->dims[0];
  images.rows = static_cast<int>(idx->dims[1]);
  images.cols = static_cast<int>(idx->dims[2]);
  images.images.reserve(idx->data.size());
  for (uint8_t pixel : idx->data) {
    images.images.push_back(NormalizePixel(pixel));
  }
  return images;
}

absl::StatusOr<std::vector<int>> Classify(nn::Model& model,
                                          const LabeledImages& images) {
  if (absl::Status s = CheckExampleSize(model, images); !s.ok()) return s;
  std::vector<int> classes(images.num_examples);
  absl::Status status = model.Predict(images.images, absl::MakeSpan(classes));
  if (!status.ok()) return status;
  return classes;
}

absl::StatusOr<double> Accuracy(nn::Model& model, const LabeledImages& data) {
  if (absl::Status s = CheckExampleSize(model, data); !s.ok()) return s;
  if (data.num_examples == 0) {
    return absl::InvalidArgumentError("no examples to measure accuracy on");
  }
  absl::StatusOr<int64_t> correct =
      model.Evaluate(data.images, data.labels, data.num_examples);
  if (!correct.ok()) return correct.status();
  return static_cast<double>(*correct) / data.num_examples;
}

}  // namespace ps::worker
