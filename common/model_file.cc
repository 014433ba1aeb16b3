#include "common/model_file.h"

#include "absl/strings/str_cat.h"
#include "common/record_file.h"
#include "common/tensor_codec.h"

namespace ps {
namespace {

constexpr absl::string_view kKind = "model";

std::string DescribeModel(const ModelSpec& model) {
  std::string description;
  PutFixed64(&description, model.tensors.size());
  for (const TensorSpec& t : model.tensors) {
    PutLengthPrefixed(&description, t.name);
    PutFixed64(&description, t.shape.size());
    for (int64_t d : t.shape) PutFixed64(&description, d);
  }
  return description;
}

}  // namespace

absl::Status SaveModel(const std::string& path, const ModelSpec& model,
                       const std::vector<std::vector<float>>& weights) {
  if (weights.size() != model.tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("saving ", weights.size(),
                                                   " tensors for a model of ",
                                                   model.tensors.size()));
  }
  std::vector<std::string> records;
  records.push_back(DescribeModel(model));
  for (size_t t = 0; t < weights.size(); ++t) {
    if (weights[t].size() !=
        static_cast<size_t>(model.tensors[t].num_elements())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", model.tensors[t].name, " has ", weights[t].size(),
          " values, expected ", model.tensors[t].num_elements()));
    }
    records.emplace_back();
    EncodeFloats(weights[t], &records.back());
  }
  return WriteRecordFile(path, kKind, records);
}

absl::StatusOr<std::vector<std::vector<float>>> LoadModel(
    const std::string& path, const ModelSpec& model) {
  absl::StatusOr<std::vector<std::string>> records =
      ReadRecordFile(path, kKind);
  if (!records.ok()) return records.status();
  if (records->empty() || (*records)[0] != DescribeModel(model)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     " holds a model with other tensors than the one "
                     "expected (check --model)"));
  }
  if (records->size() != model.tensors.size() + 1) {
    return absl::DataLossError(absl::StrCat(path, " has ", records->size() - 1,
                                            " tensors, expected ",
                                            model.tensors.size()));
  }
  std::vector<std::vector<float>> weights(model.tensors.size());
  for (size_t t = 0; t < weights.size(); ++t) {
    weights[t].resize(model.tensors[t].num_elements());
    absl::Status status =
        DecodeFloats((*records)[t + 1], absl::MakeSpan(weights[t]));
    if (!status.ok()) {
      return absl::DataLossError(absl::StrCat(
          path, ": tensor ", model.tensors[t].name, ": ", status.message()));
    }
  }
  return weights;
}

}  // namespace ps
