#include "worker/predict.h"

#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_file.h"
#include "common/status_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "worker/nn/model_description.h"

namespace ps::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// 2x2 images; class c for c < 3 scores pixel c, so an image with one bright
// pixel c is classified c.
constexpr char kModel[] = "input 1x2x2; flatten; dense 3";

void PutBigEndian32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

// Writes an uncompressed IDX file: `dims` sizes, then `data`.
void WriteIdx(const std::string& path, uint32_t magic,
              const std::vector<uint32_t>& dims,
              const std::vector<uint8_t>& data) {
  std::string bytes;
  PutBigEndian32(&bytes, magic);
  for (uint32_t d : dims) PutBigEndian32(&bytes, d);
  bytes.append(data.begin(), data.end());
  std::ofstream(path, std::ios::binary) << bytes;
}

nn::ModelDescription Describe(const std::string& text) {
  absl::StatusOr<nn::ModelDescription> d = nn::ModelDescription::Parse(text);
  EXPECT_TRUE(d.ok()) << d.status();
  return *d;
}

class PredictTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PS_ASSERT_OK_AND_ASSIGN(backend_, kernels::CreateCpuBackend());
    const std::string dir = std::getenv("TEST_TMPDIR");
    model_file_ = dir + "/tiny.model";
    images_file_ = dir + "/images.idx";
    labels_file_ = dir + "/labels.idx";
    // fc0.weight [4, 3]: pixel c -> class c; pixel 3 scores nothing.
    std::vector<std::vector<float>> weights = {
        {1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0},
        {0, 0, 0},
    };
    PS_ASSERT_OK(SaveModel(model_file_, Describe(kModel).Spec(), weights));
    // Four images: bright pixel 2, 0, 1, 2.
    WriteIdx(images_file_, 0x803, {4, 2, 2},
             {0, 0, 255, 0, 255, 0, 0, 0, 0, 255, 0, 0, 0, 0, 255, 0});
    WriteIdx(labels_file_, 0x801, {4}, {2, 0, 1, 1});
  }

  std::unique_ptr<kernels::Backend> backend_;
  std::string model_file_;
  std::string images_file_;
  std::string labels_file_;
};

TEST_F(PredictTest, LoadsSavedModelAndClassifiesIdxImages) {
  PS_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<nn::Model> model,
      LoadTrainedModel(Describe(kModel), model_file_, 3, backend_.get()));
  PS_ASSERT_OK_AND_ASSIGN(LabeledImages images, LoadIdxImages(images_file_));
  EXPECT_EQ(images.num_examples, 4);
  // Four images through batches of at most 3.
  PS_ASSERT_OK_AND_ASSIGN(std::vector<int> classes, Classify(*model, images));
  EXPECT_THAT(classes, ElementsAre(2, 0, 1, 2));
}

TEST_F(PredictTest, MeasuresAccuracyOnLabelledImages) {
  PS_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<nn::Model> model,
      LoadTrainedModel(Describe(kModel), model_file_, 8, backend_.get()));
  PS_ASSERT_OK_AND_ASSIGN(LabeledImages data,
                          LoadLabeledImages(images_file_, labels_file_));
  PS_ASSERT_OK_AND_ASSIGN(double accuracy, Accuracy(*model, data));
  EXPECT_DOUBLE_EQ(accuracy, 0.75);
}

TEST_F(PredictTest, RefusesModelFileOfAnotherDescription) {
  for (const char* other : {"input 1x2x2; flatten; dense 4",
                            "input 1x2x2; flatten; dense 5; relu; dense 3"}) {
    absl::StatusOr<std::unique_ptr<nn::Model>> model =
        LoadTrainedModel(Describe(other), model_file_, 8, backend_.get());
    testing::ExpectInvalid(model.status(), "pass the --model");
    EXPECT_THAT(std::string(model.status().message()), HasSubstr(model_file_));
  }
}

TEST_F(PredictTest, RefusesMissingModelFile) {
  EXPECT_FALSE(LoadTrainedModel(Describe(kModel), model_file_ + ".missing", 8,
                                backend_.get())
                   .ok());
}

TEST_F(PredictTest, RefusesImagesOfAnotherSize) {
  PS_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<nn::Model> model,
      LoadTrainedModel(Describe(kModel), model_file_, 8, backend_.get()));
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/3x3.idx";
  WriteIdx(path, 0x803, {1, 3, 3}, std::vector<uint8_t>(9, 0));
  PS_ASSERT_OK_AND_ASSIGN(LabeledImages images, LoadIdxImages(path));
  testing::ExpectInvalid(Classify(*model, images).status(), "9 pixels");
}

// The binary: its output and exit codes.
TEST_F(PredictTest, BinaryPrintsOneClassPerLineAndExits2OnMismatch) {
  const std::string out = std::string(std::getenv("TEST_TMPDIR")) + "/out";
  const std::string base = absl::StrCat("worker/predict --device=cpu --model='",
                                        kModel, "' --model_file=", model_file_);
  int rc = std::system(
      absl::StrCat(base, " --images=", images_file_, " >", out).c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 0);
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "2\n0\n1\n2\n");

  rc = std::system(absl::StrCat(base, " --labels=", labels_file_,
                                " --images=", images_file_, " >", out)
                       .c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 0);
  std::ifstream in2(out);
  std::string line;
  std::getline(in2, line);
  EXPECT_EQ(line, "accuracy: 0.7500 on 4 examples");

  rc = std::system(absl::StrCat("worker/predict --device=cpu --model=4-5",
                                " --model_file=", model_file_,
                                " --images=", images_file_, " 2>", out)
                       .c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 2);
}

}  // namespace
}  // namespace ps::worker
