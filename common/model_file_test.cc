#include "common/model_file.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "common/model_spec.h"
#include "common/record_file.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::vector<std::vector<float>> Weights(const ModelSpec& model) {
  std::vector<std::vector<float>> weights;
  for (const TensorSpec& t : model.tensors) {
    weights.emplace_back(t.num_elements());
    for (size_t i = 0; i < weights.back().size(); ++i) {
      weights.back()[i] = 0.25f * i - 3.0f;
    }
  }
  return weights;
}

TEST(ModelFileTest, RoundTrips) {
  const ModelSpec model = MlpModelSpec({5, 4, 3});
  const std::string path = TempPath("model");
  ASSERT_TRUE(SaveModel(path, model, Weights(model)).ok());
  absl::StatusOr<std::vector<std::vector<float>>> loaded =
      LoadModel(path, model);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, Weights(model));
}

TEST(ModelFileTest, RefusesAnotherModel) {
  const std::string path = TempPath("other");
  ASSERT_TRUE(
      SaveModel(path, MlpModelSpec({5, 4, 3}), Weights(MlpModelSpec({5, 4, 3})))
          .ok());
  absl::StatusOr<std::vector<std::vector<float>>> loaded =
      LoadModel(path, MlpModelSpec({5, 6, 3}));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelFileTest, RefusesWrongSizedWeights) {
  const ModelSpec model = MlpModelSpec({5, 4, 3});
  std::vector<std::vector<float>> weights = Weights(model);
  weights[2].pop_back();
  EXPECT_EQ(SaveModel(TempPath("bad"), model, weights).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelFileTest, ReadsAModelItDoesNotKnow) {
  ModelSpec model = MlpModelSpec({5, 4, 3});
  model.tensors.push_back({"scale", DType::kFloat32, {}, {}});
  const std::string path = TempPath("unknown");
  ASSERT_TRUE(SaveModel(path, model, Weights(model)).ok());
  absl::StatusOr<SavedModel> read = ReadModel(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->model.tensors.size(), model.tensors.size());
  for (size_t t = 0; t < model.tensors.size(); ++t) {
    EXPECT_EQ(read->model.tensors[t].name, model.tensors[t].name);
    EXPECT_EQ(read->model.tensors[t].shape, model.tensors[t].shape);
  }
  EXPECT_EQ(read->weights, Weights(model));
}

TEST(ModelFileTest, ReadRefusesAMalformedTensorList) {
  // A record file of kind "model" whose description lies about its count.
  const std::string path = TempPath("malformed");
  std::string description;
  PutFixed64(&description, 1000);
  ASSERT_TRUE(WriteRecordFile(path, "model", {description}).ok());
  EXPECT_EQ(ReadModel(path).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadModel(TempPath("missing")).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ps
