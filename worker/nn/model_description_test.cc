#include "worker/nn/model_description.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "common/status_testing.h"
#include "gtest/gtest.h"

namespace ps::worker::nn {
namespace {

using ::ps::testing::ExpectInvalid;

ModelDescription MustParse(const std::string& text) {
  absl::StatusOr<ModelDescription> d = ModelDescription::Parse(text);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : *ModelDescription::Parse("1-1");
}

std::vector<std::string> Shapes(const ModelDescription& d) {
  std::vector<std::string> shapes;
  for (const ActivationShape& s : d.output_shapes()) {
    shapes.push_back(s.ToString());
  }
  return shapes;
}

std::string WriteTempFile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ModelDescriptionTest, ShapesTheIssueExampleLayerByLayer) {
  const ModelDescription d = MustParse(
      "input 1x28x28; conv 32 5x5 pad 2; relu; maxpool 2; conv 64 5x5 pad 2; "
      "relu; maxpool 2; flatten; dense 1024; relu; dropout 0.5; dense 10");
  EXPECT_EQ(d.input().ToString(), "1x28x28");
  EXPECT_EQ(d.example_size(), 784);
  EXPECT_EQ(Shapes(d),
            (std::vector<std::string>{"32x28x28", "32x28x28", "32x14x14",
                                      "64x14x14", "64x14x14", "64x7x7", "3136",
                                      "1024", "1024", "1024", "10"}));
  EXPECT_EQ(d.num_classes(), 10);
  EXPECT_EQ(d.layers()[1].text, "relu");
  EXPECT_EQ(d.layers()[10].text, "dense 10");
}

TEST(ModelDescriptionTest, LayerSizesDeclareExactlyWhatMlpModelSpecDoes) {
  for (const char* sizes_text : {"784-256-128-10", "5-3", "7-1-2", "784-10"}) {
    SCOPED_TRACE(sizes_text);
    const ModelDescription d = MustParse(sizes_text);
    const std::vector<int> sizes = *ParseLayerSizes(sizes_text);
    for (uint64_t seed : {1, 42}) {
      const ModelSpec want = MlpModelSpec(sizes, seed);
      const ModelSpec got = d.Spec(seed);
      EXPECT_TRUE(
          CompareModelSpecs(want, "MlpModelSpec", got, "description").ok())
          << CompareModelSpecs(want, "MlpModelSpec", got, "description");
      ASSERT_EQ(got.tensors.size(), want.tensors.size());
      for (size_t i = 0; i < got.tensors.size(); ++i) {
        EXPECT_EQ(got.tensors[i].name, want.tensors[i].name);
        EXPECT_EQ(got.tensors[i].shape, want.tensors[i].shape);
        EXPECT_EQ(got.tensors[i].initializer, want.tensors[i].initializer);
        EXPECT_EQ(got.tensors[i].weight_decay, want.tensors[i].weight_decay);
      }
    }
  }
  EXPECT_EQ(MustParse("784-256-128-10").ToString(),
            "input 784; dense 256; relu; dense 128; relu; dense 10");
  EXPECT_EQ(MustParse("mlp").ToString(),
            MustParse("784-256-128-10").ToString());
}

TEST(ModelDescriptionTest, CnnPresetDeclaresTwoConvolutionsAndTwoDenseLayers) {
  const ModelDescription d = MustParse(" cnn\n");
  const ModelSpec spec = d.Spec(7);
  EXPECT_EQ(spec.seed, 7u);
  std::vector<std::string> names;
  for (const TensorSpec& t : spec.tensors) names.push_back(t.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "conv0.weight", "conv0.bias", "conv1.weight", "conv1.bias",
                "fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias"}));
  EXPECT_EQ(spec.tensors[0].shape, (std::vector<int64_t>{32, 1, 3, 3}));
  EXPECT_EQ(spec.tensors[0].initializer,
            InitializerSpec::GlorotUniform(1 * 9, 32 * 9));
  EXPECT_TRUE(spec.tensors[0].weight_decay);
  EXPECT_EQ(spec.tensors[1].shape, (std::vector<int64_t>{32}));
  EXPECT_EQ(spec.tensors[1].initializer, InitializerSpec::Zeros());
  EXPECT_FALSE(spec.tensors[1].weight_decay);
  EXPECT_EQ(spec.tensors[2].shape, (std::vector<int64_t>{64, 32, 3, 3}));
  EXPECT_EQ(spec.tensors[2].initializer,
            InitializerSpec::GlorotUniform(32 * 9, 64 * 9));
  EXPECT_EQ(spec.tensors[4].shape, (std::vector<int64_t>{64 * 7 * 7, 128}));
  EXPECT_EQ(spec.tensors[6].shape, (std::vector<int64_t>{128, 10}));
  EXPECT_FALSE(spec.tensors[7].weight_decay);
  EXPECT_TRUE(ValidateModelSpec(spec, DeclarationLimits()).ok());
  EXPECT_EQ(d.num_classes(), 10);
  EXPECT_EQ(d.example_size(), 784);
}

TEST(ModelDescriptionTest, AcceptsLinesCommentsOptionsInAnyOrderAndSoftmax) {
  const ModelDescription d = MustParse(
      "# a small net\n"
      "input 3x9x8   # RGB\n"
      "\n"
      "conv 4 3x2 pad 1x0 stride 2; relu\n"
      "avgpool 2 stride 1;;\n"
      "maxpool 2x1\n"
      "flatten; dropout 0.3\n"
      "dense 5\n"
      "softmax\n");
  // conv: (9 + 2 - 3) / 2 + 1 = 5 rows, (8 - 2) / 2 + 1 = 4 columns.
  EXPECT_EQ(Shapes(d), (std::vector<std::string>{"4x5x4", "4x5x4", "4x4x3",
                                                 "4x2x3", "24", "24", "5"}));
  EXPECT_EQ(d.layers()[0].pad_height, 1);
  EXPECT_EQ(d.layers()[0].pad_width, 0);
  EXPECT_EQ(d.layers()[0].stride_height, 2);
  EXPECT_EQ(d.layers()[3].stride_height, 2);  // The window, by default.
  EXPECT_EQ(d.layers()[3].stride_width, 1);
  EXPECT_FLOAT_EQ(d.layers()[5].rate, 0.3f);
  // The canonical text parses back to the same stack.
  const std::string canonical = d.ToString();
  EXPECT_EQ(canonical,
            "input 3x9x8; conv 4 3x2 stride 2x2 pad 1x0; relu; avgpool 2x2 "
            "stride 1x1; maxpool 2x1; flatten; dropout 0.3; dense 5");
  EXPECT_EQ(MustParse(canonical).ToString(), canonical);
  EXPECT_EQ(MustParse(MustParse("cnn").ToString()).ToString(),
            MustParse("cnn").ToString());
}

TEST(ModelDescriptionTest, StridesThatLeaveRowsUnreadRoundDown) {
  const ModelDescription d = MustParse(
      "input 2x8x7; conv 3 3x3 stride 2; maxpool 2 stride 3; "
      "flatten; dense 2");
  // conv: (8 - 3) / 2 + 1 = 3, (7 - 3) / 2 + 1 = 3; pool: (3 - 2) / 3 + 1.
  EXPECT_EQ(Shapes(d), (std::vector<std::string>{"3x3x3", "3", "3", "2"}));
  // A flat 3x1x1 output needs no flatten.
  EXPECT_EQ(MustParse("input 2x8x7; conv 3 8x7; dense 2").num_classes(), 2);
}

TEST(ModelDescriptionTest, ShapeProblemsNameTheItem) {
  ExpectInvalid(ModelDescription::Parse("input 1x4x4; conv 2 5x5; flatten; "
                                        "dense 2")
                    .status(),
                "model description: item 2 \"conv 2 5x5\": the 5x5 kernel is "
                "larger than its 4x4 input padded by 0x0");
  // Padding counts.
  EXPECT_TRUE(
      ModelDescription::Parse("input 1x4x4; conv 2 6x6 pad 1; flatten; dense 2")
          .ok());
  ExpectInvalid(
      ModelDescription::Parse("input 1x4x4\nrelu\nmaxpool 5x2\ndense 2")
          .status(),
      "line 3 \"maxpool 5x2\": the 5x2 window is larger than its 4x4 input");
  ExpectInvalid(ModelDescription::Parse("input 1x4x4; dense 3").status(),
                "item 2 \"dense 3\": dense needs a flat input but gets 1x4x4; "
                "add \"flatten\" before it");
  ExpectInvalid(ModelDescription::Parse("input 2x3x3; flatten; dense 4; "
                                        "conv 2 3x3")
                    .status(),
                "the 3x3 kernel is larger than its 1x1 input");
  ExpectInvalid(ModelDescription::Parse("input 1x8x8; conv 2 3x3").status(),
                "the last layer gives 2x6x6 per example, not a flat vector of "
                "class scores");
  ExpectInvalid(ModelDescription::Parse("input 4; relu").status(),
                "no dense or conv layer");
  ExpectInvalid(
      ModelDescription::Parse("input 1x1048576x1048576; dense 2").status(),
      "2^31 or more elements");
  ExpectInvalid(
      ModelDescription::Parse("input 1048576; dense 1048576").status(),
      "2^31 or more elements");
}

TEST(ModelDescriptionTest, BadItemsAndNumbersAreNamed) {
  struct Case {
    std::string text;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {"", "model description: the description holds no layers"},
      {" # only a comment\n ;", "holds no layers"},
      {"dense 10", "item 1 \"dense 10\": a description starts with \"input"},
      {"input 4; dense 3; tanh", "item 3 \"tanh\": unknown layer \"tanh\""},
      {"input 4; input 4; dense 2", "only the first item may be the input"},
      {"input 4; softmax; dense 2", "softmax may only be the last item"},
      {"input 4; dense 2; softmax 3", "expected \"softmax\""},
      {"input 4x4; dense 2", "expected \"input C\" or \"input CxHxW\""},
      {"input 0; dense 2", "input extent \"0\" is not a whole number"},
      {"input 1x2x3x4; dense 2", "expected \"input C\""},
      {"input 1x8x8; conv -3 3x3; flatten; dense 2",
       "output channels \"-3\" is not a whole number in [1, 1048576]"},
      {"input 1x8x8; conv 3 0x3; flatten; dense 2", "kernel \"0x3\""},
      {"input 1x8x8; conv 3 3x; flatten; dense 2", "kernel \"3x\""},
      {"input 1x8x8; conv 3; flatten; dense 2", "expected \"conv N KHxKW"},
      {"input 1x8x8; conv 3 3 stride 0; flatten; dense 2", "stride \"0\""},
      {"input 1x8x8; conv 3 3 pad -1; flatten; dense 2", "pad \"-1\""},
      {"input 1x8x8; conv 3 3 pad; flatten; dense 2",
       "option \"pad\" needs a value"},
      {"input 1x8x8; conv 3 3 stride 1 stride 2; flatten; dense 2",
       "option \"stride\" is given twice"},
      {"input 1x8x8; maxpool 2 pad 1; flatten; dense 2",
       "unknown option \"pad\"; this layer takes \"stride S\""},
      {"input 1x8x8; avgpool; flatten; dense 2", "expected \"avgpool"},
      {"input 4; dense 2.5", "outputs \"2.5\" is not a whole number"},
      {"input 4; dense", "expected \"dense N\""},
      {"input 4; relu 3; dense 2", "expected \"relu\""},
      {"input 4; dropout 1; dense 2", "rate \"1\" is not a number in [0, 1)"},
      {"input 4; dropout -0.1; dense 2", "rate \"-0.1\""},
      {"input 4; dropout nan; dense 2", "rate \"nan\""},
      {"input 4; dropout half; dense 2", "rate \"half\""},
      {"784-0-10", "\"0\" is not a whole number in [1, 1048576]"},
      {"784", "need at least an input and an output layer"},
      {"Dense 3", "a description starts with"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    ExpectInvalid(ModelDescription::Parse(c.text).status(), c.fragment);
  }
}

TEST(ModelDescriptionTest, FlagReadsFilesAndNamesMissingOnes) {
  const std::string good = WriteTempFile(
      "good.model", "input 1x6x6\nconv 2 3x3\nrelu\nflatten\ndense 3\n");
  absl::StatusOr<ModelDescription> d = ModelDescription::FromFlag("@" + good);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ToString(), "input 1x6x6; conv 2 3x3; relu; flatten; dense 3");

  const std::string bad = WriteTempFile(
      "bad.model", "input 1x6x6\n# comment\nconv 2 7x7\nflatten\ndense 3\n");
  ExpectInvalid(ModelDescription::FromFlag("@" + bad).status(),
                "model file \"" + bad +
                    "\": line 3 \"conv 2 7x7\": the 7x7 kernel is larger");

  ExpectInvalid(
      ModelDescription::FromFlag("@/nonexistent/dir/x.model").status(),
      "model file \"/nonexistent/dir/x.model\" cannot be opened");
  ExpectInvalid(ModelDescription::FromFlag("@").status(), "names no file");

  // Without '@' the flag is the description itself.
  EXPECT_EQ(ModelDescription::FromFlag("784-256-128-10")->ToString(),
            MustParse("mlp").ToString());
  ExpectInvalid(ModelDescription::FromFlag("cnn2").status(),
                "a description starts with");
}

TEST(ModelDescriptionTest, CreateChecksStacksBuiltInCode) {
  LayerConfig dense;
  dense.kind = LayerKind::kDense;
  dense.units = 3;
  absl::StatusOr<ModelDescription> d =
      ModelDescription::Create({5, 1, 1}, {dense});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ToString(), "input 5; dense 3");
  EXPECT_EQ(d->layers()[0].text, "dense 3");

  dense.units = 0;
  ExpectInvalid(
      ModelDescription::Create({5, 1, 1}, {dense}, "test net").status(),
      "test net: layer 0 \"dense 0\": sizes, channels");
  LayerConfig conv;
  conv.kind = LayerKind::kConv;
  conv.units = 2;
  conv.kernel_height = conv.kernel_width = 3;
  conv.stride_height = 0;
  ExpectInvalid(ModelDescription::Create({1, 5, 5}, {conv}).status(),
                "strides must be in [1, 1048576]");
  ExpectInvalid(ModelDescription::Create({0, 5, 5}, {conv}).status(),
                "input 0x5x5");
  LayerConfig dropout;
  dropout.kind = LayerKind::kDropout;
  dropout.rate = 1.5f;
  dense.units = 2;
  ExpectInvalid(ModelDescription::Create({4, 1, 1}, {dropout, dense}).status(),
                "rate 1.5 is not in [0, 1)");
}

}  // namespace
}  // namespace ps::worker::nn
