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

// The inverse of DescribeModel; false if `description` is malformed.
bool ParseDescription(absl::string_view description, ModelSpec* model) {
  uint64_t count = 0;
  if (!GetFixed64(&description, &count)) return false;
  // Each tensor takes at least 16 bytes: no count beyond that is real.
  if (count > description.size() / 16) return false;
  for (uint64_t t = 0; t < count; ++t) {
    TensorSpec& spec = model->tensors.emplace_back();
    absl::string_view name;
    uint64_t rank = 0;
    if (!GetLengthPrefixed(&description, &name) ||
        !GetFixed64(&description, &rank) || rank > description.size() / 8) {
      return false;
    }
    spec.name = std::string(name);
    for (uint64_t d = 0; d < rank; ++d) {
      uint64_t dim = 0;
      if (!GetFixed64(&description, &dim)) return false;
      spec.shape.push_back(static_cast<int64_t>(dim));
    }
  }
  return description.empty();
}

// The weights records after the description, for `model`.
absl::StatusOr<std::vector<std::vector<float>>> DecodeWeights(
    const std::string& path, const std::vector<std::string>& records,
    const ModelSpec& model) {
  if (records.size() != model.tensors.size() + 1) {
    return absl::DataLossError(absl::StrCat(path, " has ", records.size() - 1,
                                            " tensors, expected ",
                                            model.tensors.size()));
  }
  std::vector<std::vector<float>> weights(model.tensors.size());
  for (size_t t = 0; t < weights.size(); ++t) {
    weights[t].resize(model.tensors[t].num_elements());
    absl::Status status =
        DecodeFloats(records[t + 1], absl::MakeSpan(weights[t]));
    if (!status.ok()) {
      return absl::DataLossError(absl::StrCat(
          path, ": tensor ", model.tensors[t].name, ": ", status.message()));
    }
  }
  return weights;
}

}  // namespace

absl::StatusOr<SavedModel> ReadModel(const std::string& path) {
  absl::StatusOr<std::vector<std::string>> records =
      ReadRecordFile(path, kKind);
  if (!records.ok()) return records.status();
  SavedModel saved;
  if (records->empty() || !ParseDescription((*records)[0], &saved.model)) {
    return absl::DataLossError(
        absl::StrCat(path, ": the tensor list is malformed"));
  }
  // Checked as a declaration would be, so that sizes below are sane.
  DeclarationLimits limits;
  limits.max_rank = 64;
  limits.max_name_bytes = 1 << 16;
  limits.max_tensors = 1 << 24;
  limits.max_model_bytes = ~uint64_t{0};
  if (absl::Status s = ValidateModelSpec(saved.model, limits); !s.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", s.message()));
  }
  absl::StatusOr<std::vector<std::vector<float>>> weights =
      DecodeWeights(path, *records, saved.model);
  if (!weights.ok()) return weights.status();
  saved.weights = *std::move(weights);
  return saved;
}

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
  return DecodeWeights(path, *records, model);
}

}  // namespace ps
