#include "common/model_spec.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "common/declaration_proto.h"
#include "common/status_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::ExpectInvalid;
using ::testing::HasSubstr;

// A declaration no flag describes: a scalar, a rank-3 tensor, names with
// dots and slashes, every initializer kind.
ModelSpec Unusual() {
  ModelSpec m;
  m.seed = 42;
  m.tensors.push_back(
      {"scale", DType::kFloat32, {}, InitializerSpec::Constant(1.5), false});
  m.tensors.push_back({"encoder/block.0/w",
                       DType::kFloat32,
                       {3, 5, 7},
                       InitializerSpec::GlorotUniform(35, 3)});
  m.tensors.push_back(
      {"u", DType::kFloat32, {4}, InitializerSpec::Uniform(-1, 2)});
  m.tensors.push_back(
      {"n", DType::kFloat32, {2, 2}, InitializerSpec::Normal(0, 0.1)});
  m.tensors.push_back({"e",
                       DType::kFloat32,
                       {9},
                       InitializerSpec::FromRank0(),
                       /*weight_decay=*/false,
                       /*assigned=*/true});
  m.tensors.push_back({"z", DType::kFloat32, {1}, InitializerSpec::Zeros()});
  return m;
}

TEST(ModelSpecTest, ScalarsHaveOneElement) {
  const ModelSpec m = Unusual();
  EXPECT_EQ(m.tensors[0].num_elements(), 1);
  EXPECT_EQ(m.tensors[1].num_elements(), 105);
  EXPECT_EQ(m.total_elements(), 1 + 105 + 4 + 4 + 9 + 1);
  EXPECT_EQ(m.FindTensor("encoder/block.0/w"), 1);
  EXPECT_EQ(m.FindTensor("missing"), -1);
}

TEST(ModelSpecTest, AcceptsAnUnusualDeclaration) {
  EXPECT_TRUE(ValidateModelSpec(Unusual(), DeclarationLimits()).ok());
  EXPECT_TRUE(
      ValidateModelSpec(MlpModelSpec({784, 256, 10}), DeclarationLimits())
          .ok());
}

TEST(ModelSpecTest, RefusesBadDeclarationsNamingTheProblem) {
  struct Case {
    std::function<void(ModelSpec&)> damage;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {[](ModelSpec& m) { m.tensors.clear(); }, "has no tensors"},
      {[](ModelSpec& m) { m.tensors[2].name = ""; }, "name is empty"},
      {[](ModelSpec& m) { m.tensors[2].name = "a b"; }, "byte 0x20"},
      {[](ModelSpec& m) { m.tensors[2].name = "a\nb"; }, "byte 0xa"},
      {[](ModelSpec& m) { m.tensors[2].name = std::string(300, 'x'); },
       "300 bytes"},
      {[](ModelSpec& m) { m.tensors[3].name = "u"; }, "declared twice"},
      {[](ModelSpec& m) {
         m.tensors[1].shape = {3, 0, 7};
       },
       "[3,0,7] has a dimension below 1"},
      {[](ModelSpec& m) { m.tensors[1].shape = {-3}; }, "below 1"},
      {[](ModelSpec& m) { m.tensors[1].shape = std::vector<int64_t>(9, 1); },
       "rank 9"},
      {[](ModelSpec& m) {
         m.tensors[1].shape = {1 << 30, 1 << 30, 1 << 30};
       },
       "larger than the servers' limit"},
      {[](ModelSpec& m) { m.tensors[1].dtype = static_cast<DType>(7); },
       "dtype 7"},
      {[](ModelSpec& m) {
         m.tensors[2].initializer = InitializerSpec::Uniform(2, 2);
       },
       "low < high"},
      // Both ends round to the same float: values came out below `low`
      // (found by fuzz/declaration_fuzzer).
      {[](ModelSpec& m) {
         m.tensors[2].initializer = InitializerSpec::Uniform(1, 1 + 1e-12);
       },
       "low < high (as float32)"},
      {[](ModelSpec& m) {
         m.tensors[2].initializer = InitializerSpec::Uniform(1e-300, 1e-290);
       },
       "low < high (as float32)"},
      {[](ModelSpec& m) {
         m.tensors[3].initializer = InitializerSpec::Normal(0, -1);
       },
       "stddev >= 0"},
      {[](ModelSpec& m) {
         m.tensors[0].initializer = InitializerSpec::Constant(NAN);
       },
       "not a finite float"},
      {[](ModelSpec& m) {
         m.tensors[0].initializer = InitializerSpec::Constant(1e39);
       },
       "not a finite float"},
      {[](ModelSpec& m) {
         m.tensors[1].initializer = InitializerSpec::GlorotUniform(0, 3);
       },
       "fan_in and fan_out"},
  };
  for (const Case& c : cases) {
    ModelSpec m = Unusual();
    c.damage(m);
    ExpectInvalid(ValidateModelSpec(m, DeclarationLimits()), c.fragment);
  }
}

TEST(ModelSpecTest, LimitsComeFromTheServer) {
  DeclarationLimits limits;
  limits.max_tensors = 5;
  ExpectInvalid(ValidateModelSpec(Unusual(), limits),
                "6 tensors; the limit is 5");
  limits = DeclarationLimits();
  limits.max_model_bytes = 440;
  ExpectInvalid(ValidateModelSpec(Unusual(), limits),
                "more than the servers' limit of 440 bytes (--max_model_bytes) "
                "by tensor 3");
  limits.max_model_bytes = 4 * 124;
  EXPECT_TRUE(ValidateModelSpec(Unusual(), limits).ok());
}

TEST(ModelSpecTest, ComparisonNamesTheFirstDifference) {
  const ModelSpec a = Unusual();
  EXPECT_TRUE(CompareModelSpecs(a, "rank 0", a, "rank 1").ok());
  struct Case {
    std::function<void(ModelSpec&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](ModelSpec& m) {
         m.tensors[1].shape = {3, 7, 5};
       },
       "tensor 1 \"encoder/block.0/w\" shape: [3,7,5] declared by rank 1, "
       "[3,5,7] by rank 0"},
      {[](ModelSpec& m) { m.tensors[2].name = "v"; },
       "tensor 2: \"v\" declared by rank 1, \"u\" by rank 0"},
      {[](ModelSpec& m) {
         m.tensors[3].initializer = InitializerSpec::Normal(0, 0.2);
       },
       "tensor 3 \"n\" initializer: normal(0, 0.2) declared by rank 1, "
       "normal(0, 0.1) by rank 0"},
      {[](ModelSpec& m) { m.tensors[0].weight_decay = true; },
       "weight decay: on declared by rank 1, off by rank 0"},
      {[](ModelSpec& m) { m.tensors[4].assigned = false; },
       "tensor 4 \"e\" assignment: optimized declared by rank 1, assigned "
       "(a buffer) by rank 0"},
      {[](ModelSpec& m) { m.tensors.pop_back(); },
       "rank 1 declares 5 tensors, rank 0 6: tensor 5 \"z\" is declared only "
       "by rank 0"},
      {[](ModelSpec& m) { m.seed = 43; },
       "initializer seed: 43 declared by rank 1, 42 by rank 0"},
  };
  for (const Case& c : cases) {
    ModelSpec b = a;
    c.change(b);
    const absl::Status s = CompareModelSpecs(a, "rank 0", b, "rank 1");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
  }
}

TEST(ModelSpecTest, ProtoRoundTripKeepsEverything) {
  const ModelSpec a = Unusual();
  proto::ModelDeclaration p;
  ModelSpecToProto(a, &p);
  absl::StatusOr<ModelSpec> b = ModelSpecFromProto(p);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(CompareModelSpecs(a, "sent", *b, "received").ok());

  p.mutable_tensors(1)->set_dtype(static_cast<proto::DType>(9));
  ExpectInvalid(ModelSpecFromProto(p).status(), "dtype 9");
  ModelSpecToProto(a, &p);
  p.mutable_tensors(2)->mutable_initializer()->set_kind(
      static_cast<proto::Initializer::Kind>(77));
  ExpectInvalid(ModelSpecFromProto(p).status(), "initializer kind 77");
}

TEST(ModelSpecTest, ComparesOnlyTheParametersAnInitializerUses) {
  // A NaN where the kind reads nothing passes validation; compared, it made
  // a declaration differ from itself, so a rank sending rank 0's very bytes
  // was refused (found by fuzz/declaration_fuzzer).
  proto::ModelDeclaration p;
  ModelSpecToProto(Unusual(), &p);
  p.mutable_tensors(4)->mutable_initializer()->set_stddev(std::nan(""));
  p.mutable_tensors(1)->mutable_initializer()->set_value(std::nan(""));
  absl::StatusOr<ModelSpec> a = ModelSpecFromProto(p);
  absl::StatusOr<ModelSpec> b = ModelSpecFromProto(p);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(ValidateModelSpec(*a, DeclarationLimits()).ok());
  EXPECT_TRUE(CompareModelSpecs(*a, "rank 0", *b, "rank 1").ok());

  ModelSpec c = *a;
  c.tensors[1].initializer.mean = 3;  // Glorot-uniform reads no mean.
  EXPECT_TRUE(CompareModelSpecs(*a, "rank 0", c, "rank 1").ok());
  c.tensors[1].initializer.fan_in = 36;
  EXPECT_FALSE(CompareModelSpecs(*a, "rank 0", c, "rank 1").ok());
}

TEST(ModelSpecTest, RefusesADeclaredOptimizerOutOfRange) {
  struct Case {
    std::function<void(OptimizerSpec&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](OptimizerSpec& o) { o.learning_rate = 0; }, "learning_rate"},
      {[](OptimizerSpec& o) { o.learning_rate = NAN; }, "learning_rate"},
      {[](OptimizerSpec& o) { o.learning_rate = INFINITY; }, "learning_rate"},
      {[](OptimizerSpec& o) { o.momentum = 1; }, "momentum must be in [0, 1)"},
      {[](OptimizerSpec& o) { o.momentum = -0.1f; }, "momentum"},
      {[](OptimizerSpec& o) { o.beta1 = 1; }, "beta1"},
      {[](OptimizerSpec& o) { o.beta2 = -1; }, "beta2"},
      {[](OptimizerSpec& o) { o.epsilon = 0; }, "epsilon"},
      {[](OptimizerSpec& o) { o.weight_decay = -1e-4f; }, "weight_decay"},
      {[](OptimizerSpec& o) { o.kind = static_cast<OptimizerKind>(9); },
       "optimizer kind 9"},
  };
  DeclarationLimits limits;
  ModelSpec model = Unusual();
  model.optimizer = OptimizerSpec::Sgd(0.1f, 0.9f, 1e-4f);
  EXPECT_TRUE(ValidateModelSpec(model, limits).ok());
  for (const Case& c : cases) {
    ModelSpec bad = model;
    c.change(*bad.optimizer);
    ExpectInvalid(ValidateModelSpec(bad, limits), "the declared optimizer's");
    ExpectInvalid(ValidateModelSpec(bad, limits), c.message);
  }
}

TEST(ModelSpecTest, ComparesTheDeclaredOptimizer) {
  ModelSpec a = Unusual();
  a.optimizer = OptimizerSpec::Sgd(0.1f, 0.9f);
  ModelSpec b = a;
  // What SGD does not use does not count.
  b.optimizer->beta1 = 0.5f;
  EXPECT_TRUE(CompareModelSpecs(a, "rank 0", b, "rank 1").ok());
  b.optimizer = OptimizerSpec::Adam(0.1f);
  absl::Status s = CompareModelSpecs(a, "rank 0", b, "rank 1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("optimizer: adam(learning_rate 0.1, weight_decay 0, "
                        "beta1 0.9, beta2 0.999, epsilon 1e-08) declared by "
                        "rank 1, sgd(learning_rate 0.1, weight_decay 0, "
                        "momentum 0.9) by rank 0"));
  b.optimizer.reset();
  s = CompareModelSpecs(a, "rank 0", b, "rank 1");
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("optimizer: none (the servers' flags) declared by "
                        "rank 1"));
  b.optimizer = OptimizerSpec::Sgd(0.05f, 0.9f);
  s = CompareModelSpecs(a, "rank 0", b, "rank 1");
  EXPECT_THAT(std::string(s.message()), HasSubstr("learning_rate 0.05"));
}

TEST(ModelSpecTest, ProtoRoundTripKeepsTheOptimizer) {
  ModelSpec a = Unusual();
  proto::ModelDeclaration p;
  ModelSpecToProto(a, &p);
  EXPECT_FALSE(p.has_optimizer());
  absl::StatusOr<ModelSpec> b = ModelSpecFromProto(p);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->optimizer.has_value());

  a.optimizer = OptimizerSpec::Adam(0.003f, 0.8f, 0.99f, 1e-6f, 0.01f);
  ModelSpecToProto(a, &p);
  b = ModelSpecFromProto(p);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(b->optimizer.has_value());
  EXPECT_EQ(*b->optimizer, *a.optimizer);
  EXPECT_EQ(b->optimizer->weight_decay, 0.01f);
  EXPECT_TRUE(CompareModelSpecs(a, "sent", *b, "received").ok());

  p.mutable_optimizer()->set_kind(
      static_cast<proto::OptimizerDeclaration::Kind>(5));
  ExpectInvalid(ModelSpecFromProto(p).status(), "optimizer's kind 5");
  p.mutable_optimizer()->set_kind(
      proto::OptimizerDeclaration::KIND_UNSPECIFIED);
  ExpectInvalid(ModelSpecFromProto(p).status(), "optimizer's kind 0");
}

TEST(ModelSpecTest, MlpBiasesSkipWeightDecay) {
  const ModelSpec m = MlpModelSpec({4, 3, 2}, /*seed=*/9);
  ASSERT_EQ(m.tensors.size(), 4u);
  EXPECT_EQ(m.seed, 9u);
  EXPECT_TRUE(m.tensors[0].weight_decay);
  EXPECT_FALSE(m.tensors[1].weight_decay);
  EXPECT_EQ(m.tensors[0].initializer, InitializerSpec::GlorotUniform(4, 3));
  EXPECT_EQ(m.tensors[1].initializer, InitializerSpec::Zeros());
}

}  // namespace
}  // namespace ps
