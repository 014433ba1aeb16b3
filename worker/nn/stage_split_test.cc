#include "worker/nn/stage_split.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "worker/nn/model_description.h"

namespace ps::worker::nn {
namespace {

ModelDescription Describe(const std::string& text) {
  absl::StatusOr<ModelDescription> d = ModelDescription::Parse(text);
  EXPECT_TRUE(d.ok()) << d.status();
  return *d;
}

TEST(StageSplitTest, OneStageIsTheWholeModel) {
  const ModelDescription d = Describe("784-256-128-10");
  PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> stages,
                          SplitByParameterBytes(d, 1));
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_EQ(stages[0].first_layer, 0);
  EXPECT_EQ(stages[0].end_layer, static_cast<int>(d.layers().size()));
  EXPECT_EQ(stages[0].first_tensor, 0);
  EXPECT_EQ(stages[0].end_tensor, 6);
  EXPECT_EQ(stages[0].parameter_bytes,
            4 * (784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10));
  EXPECT_EQ(stages[0].output_size, 10);
}

TEST(StageSplitTest, StagesCoverTheLayersContiguouslyAndTheirTensors) {
  const ModelDescription d = Describe("cnn");
  const ModelSpec spec = d.Spec();
  for (int k = 1; k <= static_cast<int>(d.layers().size()); ++k) {
    PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> stages,
                            SplitByParameterBytes(d, k));
    ASSERT_EQ(stages.size(), static_cast<size_t>(k));
    int layer = 0, tensor = 0;
    int64_t bytes = 0;
    for (const StageRange& s : stages) {
      EXPECT_EQ(s.first_layer, layer);
      EXPECT_LT(s.first_layer, s.end_layer) << "every stage has a layer";
      EXPECT_EQ(s.first_tensor, tensor);
      int64_t stage_bytes = 0;
      for (int t = s.first_tensor; t < s.end_tensor; ++t) {
        stage_bytes += 4 * spec.tensors[t].num_elements();
      }
      EXPECT_EQ(s.parameter_bytes, stage_bytes);
      EXPECT_EQ(s.output_size, d.output_shapes()[s.end_layer - 1].size());
      layer = s.end_layer;
      tensor = s.end_tensor;
      bytes += stage_bytes;
    }
    EXPECT_EQ(layer, static_cast<int>(d.layers().size()));
    EXPECT_EQ(tensor, static_cast<int>(spec.tensors.size()));
  }
}

TEST(StageSplitTest, BalancesParameterBytes) {
  // Two equal dense layers of 100x100 and a small one: the heavy ones go
  // to different stages.
  const ModelDescription d = Describe("100-100-100-10");
  PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> stages,
                          SplitByParameterBytes(d, 2));
  // Layers: dense, relu, dense, relu, dense; the ReLU sends as much as
  // the dense layer before it, so either cut will do.
  EXPECT_LE(stages[0].end_layer, 2) << stages[0].ToString(d);
  EXPECT_EQ(stages[0].parameter_bytes, 4 * (100 * 100 + 100));
  EXPECT_EQ(stages[1].parameter_bytes, 4 * (100 * 100 + 100 + 100 * 10 + 10));
}

TEST(StageSplitTest, AmongEqualSplitsCutsWhereTheLeastIsSent) {
  // The CNN's dense 128 outweighs everything else: every cut between conv1
  // and it balances alike, and after the second maxpool (64x7x7) the least
  // crosses.
  const ModelDescription d = Describe("cnn");
  PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> stages,
                          SplitByParameterBytes(d, 2));
  const LayerConfig& last_of_first = d.layers()[stages[0].end_layer - 1];
  EXPECT_EQ(d.layers()[stages[1].first_layer].kind, LayerKind::kFlatten)
      << stages[0].ToString(d) << "; " << stages[1].ToString(d);
  EXPECT_EQ(last_of_first.kind, LayerKind::kMaxPool);
  EXPECT_EQ(stages[0].output_size, 64 * 7 * 7);
}

TEST(StageSplitTest, RefusesMoreStagesThanLayersNamingTheFlag) {
  const ModelDescription d = Describe("input 4; dense 3");
  absl::StatusOr<std::vector<StageRange>> split = SplitByParameterBytes(d, 2);
  ASSERT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(split.status().message().find("--pipeline_stages=2"),
            std::string::npos)
      << split.status();
  EXPECT_NE(split.status().message().find("--model"), std::string::npos);
  EXPECT_FALSE(SplitByParameterBytes(d, 0).ok());
}

TEST(LayerFlopsTest, CountsMultiplyAddsTwiceAndSkipsTheFirstInputGradient) {
  // conv 4 3x3 pad 1 on 2x5x5: 4x5x5 outputs of 2x3x3 multiply-adds each.
  const ModelDescription d = Describe(
      "input 2x5x5; conv 4 3x3 pad 1; relu; maxpool 2; flatten; dense 3");
  const int64_t conv_forward = 2 * (4 * 5 * 5) * (2 * 3 * 3);
  EXPECT_EQ(LayerFlops(d, 0), 2 * conv_forward) << "no input gradient";
  EXPECT_EQ(LayerFlops(d, 1), 2 * 4 * 5 * 5);
  EXPECT_EQ(LayerFlops(d, 2), 2 * (4 * 2 * 2) * (2 * 2));
  EXPECT_EQ(LayerFlops(d, 3), 0);
  EXPECT_EQ(LayerFlops(d, 4), 3 * (2 * 16 * 3)) << "with input gradient";
}

TEST(StageSplitTest, ComputeSplitBalancesFlopsWhereBytesDoNot) {
  // The cnn preset: dense 128 holds 95% of the parameters, the second
  // convolution most of the compute.
  const ModelDescription d = Describe("cnn");
  PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> by_compute,
                          SplitByCompute(d, 3));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> by_bytes,
                          SplitByParameterBytes(d, 3));
  int64_t total = 0;
  for (int l = 0; l < static_cast<int>(d.layers().size()); ++l) {
    total += LayerFlops(d, l);
  }
  int64_t most_by_compute = 0, most_by_bytes = 0, sum = 0;
  for (int s = 0; s < 3; ++s) {
    int64_t flops = 0;
    for (int l = by_compute[s].first_layer; l < by_compute[s].end_layer; ++l) {
      flops += LayerFlops(d, l);
    }
    EXPECT_EQ(by_compute[s].flops, flops) << by_compute[s].ToString(d);
    sum += flops;
    most_by_compute = std::max(most_by_compute, flops);
    most_by_bytes = std::max(most_by_bytes, by_bytes[s].flops);
  }
  EXPECT_EQ(sum, total);
  EXPECT_LT(most_by_compute, most_by_bytes);
  // The second convolution alone is a stage.
  const LayerConfig& conv2 = d.layers()[by_compute[1].first_layer];
  EXPECT_EQ(conv2.text, "conv 64 3x3 pad 1") << by_compute[1].ToString(d);
  // Every rank computes the same split.
  PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> again,
                          SplitStages(d, 3, StageSplitKind::kCompute));
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(again[s].first_layer, by_compute[s].first_layer);
  }
}

TEST(StageSplitTest, SplitNamesRoundTripAndOthersAreRefusedNamingTheFlag) {
  for (StageSplitKind kind :
       {StageSplitKind::kBytes, StageSplitKind::kCompute}) {
    PS_ASSERT_OK_AND_ASSIGN(StageSplitKind parsed,
                            ParseStageSplit(StageSplitName(kind)));
    EXPECT_EQ(parsed, kind);
  }
  absl::StatusOr<StageSplitKind> bad = ParseStageSplit("time");
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--stage_split=time"),
            std::string::npos);
}

}  // namespace
}  // namespace ps::worker::nn
