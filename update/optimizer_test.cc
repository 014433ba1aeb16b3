#include "update/optimizer.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps::update {
namespace {

std::unique_ptr<Optimizer> Make(const OptimizerConfig& config, size_t n) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CreateOptimizer(config, n);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return *std::move(opt);
}

OptimizerConfig Sgd(float lr, float momentum, float weight_decay) {
  return OptimizerConfig::Sgd(lr, momentum, weight_decay);
}

OptimizerConfig Adam(float lr, float weight_decay) {
  OptimizerConfig c = OptimizerConfig::Adam(lr);
  c.weight_decay = weight_decay;
  return c;
}

TEST(OptimizerTest, PlainSgdStepsAgainstTheGradient) {
  auto opt = Make(Sgd(0.1f, 0.0f, 0.0f), 2);
  std::vector<float> w = {1.0f, -2.0f};
  ASSERT_TRUE(opt->Apply({0.5f, -1.0f}, absl::MakeSpan(w)).ok());
  EXPECT_FLOAT_EQ(w[0], 0.95f);
  EXPECT_FLOAT_EQ(w[1], -1.9f);
  EXPECT_TRUE(opt->state().empty());
  EXPECT_EQ(opt->update_count(), 1u);
}

TEST(OptimizerTest, AnAssignmentSetsThePushedValuesKeepingNonFiniteOut) {
  std::unique_ptr<Optimizer> opt = CreateAssignment(3);
  std::vector<float> w = {1.0f, 2.0f, 3.0f};
  const float inf = std::numeric_limits<float>::infinity();
  // The learning rate is not used.
  ASSERT_TRUE(opt->Apply({0.5f, -4.0f, inf}, absl::MakeSpan(w), 0.1f).ok());
  EXPECT_EQ(w, (std::vector<float>{0.5f, -4.0f, 3.0f}));
  EXPECT_TRUE(opt->state().empty());
  EXPECT_EQ(opt->incomplete_updates(), 1u);
  ASSERT_TRUE(opt->Apply({7.0f, 8.0f, 9.0f}, absl::MakeSpan(w), 0.0f).ok());
  EXPECT_EQ(w, (std::vector<float>{7.0f, 8.0f, 9.0f}));
}

TEST(OptimizerTest, SgdWeightDecayAddsL2TermToGradient) {
  auto opt = Make(Sgd(0.1f, 0.0f, 0.1f), 1);
  std::vector<float> w = {1.0f};
  ASSERT_TRUE(opt->Apply({0.5f}, absl::MakeSpan(w)).ok());
  EXPECT_FLOAT_EQ(w[0], 0.94f);  // 1 - 0.1 * (0.5 + 0.1 * 1)
  ASSERT_TRUE(opt->Apply({0.5f}, absl::MakeSpan(w)).ok());
  EXPECT_FLOAT_EQ(w[0], 0.8806f);  // 0.94 - 0.1 * (0.5 + 0.094)
}

TEST(OptimizerTest, SgdMomentumAccumulatesVelocity) {
  auto opt = Make(Sgd(0.1f, 0.9f, 0.0f), 1);
  std::vector<float> w = {1.0f};
  const float expected_w[] = {0.9f, 0.71f, 0.439f};
  const float expected_v[] = {1.0f, 1.9f, 2.71f};
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(opt->Apply({1.0f}, absl::MakeSpan(w)).ok());
    EXPECT_FLOAT_EQ(w[0], expected_w[step]) << "step " << step;
    std::vector<OptimizerStateVector> state = opt->state();
    ASSERT_EQ(state.size(), 1u);
    EXPECT_EQ(state[0].name, "momentum");
    EXPECT_FLOAT_EQ(state[0].values[0], expected_v[step]) << "step " << step;
  }
}

TEST(OptimizerTest, AdamMatchesHandComputedSteps) {
  auto opt = Make(Adam(0.1f, 0.0f), 1);
  std::vector<float> w = {0.0f};
  // Computed in double precision from the update rule in optimizer.h.
  const float gradients[] = {1.0f, -1.0f, 3.0f};
  const float expected[] = {-0.1f, -0.0947368411f, -0.150793861f};
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(opt->Apply({gradients[step]}, absl::MakeSpan(w)).ok());
    EXPECT_NEAR(w[0], expected[step], 1e-6) << "step " << step;
  }
  EXPECT_EQ(opt->update_count(), 3u);
  std::vector<OptimizerStateVector> state = opt->state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].name, "m");
  EXPECT_NEAR(state[0].values[0], 0.291f, 1e-6);  // 0.9 * -0.01 + 0.1 * 3
  EXPECT_EQ(state[1].name, "v");
  EXPECT_NEAR(state[1].values[0], 0.010997001f, 1e-6);
}

TEST(OptimizerTest, AdamWeightDecayPullsWeightsTowardZero) {
  auto opt = Make(Adam(0.1f, 0.5f), 1);
  std::vector<float> w = {1.0f};
  ASSERT_TRUE(opt->Apply({0.0f}, absl::MakeSpan(w)).ok());
  EXPECT_NEAR(w[0], 0.900000002f, 1e-6);
  ASSERT_TRUE(opt->Apply({0.0f}, absl::MakeSpan(w)).ok());
  EXPECT_NEAR(w[0], 0.800412232f, 1e-6);
}

TEST(OptimizerTest, AdamBiasCorrectionUsesRestoredUpdateCount) {
  // A restored optimizer continues from its count: with zeroed moments and
  // t = 1001, 1 - b1^t is about 1 but 1 - b2^t only 0.632, so the step is
  // -0.1 * 0.1 / sqrt(0.001 / 0.632) instead of a fresh optimizer's -0.1.
  auto fresh = Make(Adam(0.1f, 0.0f), 1);
  auto restored = Make(Adam(0.1f, 0.0f), 1);
  restored->set_update_count(1000);
  std::vector<float> a = {0.0f}, b = {0.0f};
  ASSERT_TRUE(fresh->Apply({1.0f}, absl::MakeSpan(a)).ok());
  ASSERT_TRUE(restored->Apply({1.0f}, absl::MakeSpan(b)).ok());
  EXPECT_NEAR(a[0], -0.1f, 1e-6);
  EXPECT_NEAR(b[0], -0.25152971f, 1e-5);
  EXPECT_EQ(restored->update_count(), 1001u);
}

TEST(OptimizerTest, UsesTheLearningRateGivenForTheUpdate) {
  auto opt = Make(Sgd(1.0f, 0.0f, 0.0f), 1);
  std::vector<float> w = {1.0f};
  ASSERT_TRUE(opt->Apply({0.5f}, absl::MakeSpan(w), 0.25f).ok());
  EXPECT_FLOAT_EQ(w[0], 1.0f - 0.25f * 0.5f);
  EXPECT_FLOAT_EQ(opt->learning_rate(), 1.0f);
  for (float bad : {-0.1f, NAN, INFINITY}) {
    EXPECT_EQ(opt->Apply({0.5f}, absl::MakeSpan(w), bad).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(opt->update_count(), 1u);
}

TEST(OptimizerTest, RejectsMismatchedSizesWithoutChangingAnything) {
  auto opt = Make(Adam(0.1f, 0.0f), 2);
  std::vector<float> w = {1.0f, 2.0f};
  absl::Status s = opt->Apply({1.0f}, absl::MakeSpan(w));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(opt->update_count(), 0u);
}

TEST(OptimizerTest, RejectsInvalidConfigNamingTheFlag) {
  struct Case {
    OptimizerConfig config;
    const char* flag;
  };
  OptimizerConfig negative_lr = Sgd(-1.0f, 0.0f, 0.0f);
  OptimizerConfig zero_lr = Sgd(0.0f, 0.0f, 0.0f);
  OptimizerConfig nan_lr = Sgd(NAN, 0.0f, 0.0f);
  OptimizerConfig big_momentum = Sgd(0.1f, 1.0f, 0.0f);
  OptimizerConfig negative_decay = Sgd(0.1f, 0.0f, -0.1f);
  OptimizerConfig bad_beta1 = Adam(0.1f, 0.0f);
  bad_beta1.beta1 = 1.5f;
  OptimizerConfig bad_beta2 = Adam(0.1f, 0.0f);
  bad_beta2.beta2 = -0.1f;
  OptimizerConfig bad_epsilon = Adam(0.1f, 0.0f);
  bad_epsilon.epsilon = 0.0f;
  const Case cases[] = {
      {negative_lr, "--learning_rate"},
      {zero_lr, "--learning_rate"},
      {nan_lr, "--learning_rate"},
      {big_momentum, "--momentum"},
      {negative_decay, "--weight_decay"},
      {bad_beta1, "--beta1"},
      {bad_beta2, "--beta2"},
      {bad_epsilon, "--epsilon"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::unique_ptr<Optimizer>> opt =
        CreateOptimizer(c.config, 4);
    ASSERT_FALSE(opt.ok()) << c.flag;
    EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(opt.status().message().find(c.flag), absl::string_view::npos)
        << opt.status();
  }
}

TEST(OptimizerTest, AnUpdateThatWouldOverflowLeavesItsElementAsItWas) {
  constexpr float kMax = std::numeric_limits<float>::max();
  struct Case {
    const char* name;
    OptimizerConfig config;
    // Finite, and large enough to overflow element 1's update.
    float huge_gradient;
  };
  for (const Case& c : {
           // -max - max overflows the weight.
           Case{"sgd", Sgd(1.0f, 0.0f, 0.0f), kMax},
           // The velocity is about max, and the weight overflows.
           Case{"momentum", Sgd(1.0f, 0.5f, 0.0f), kMax},
           // (1 - beta2) g g overflows Adam's second moment.
           Case{"adam", Adam(0.1f, 0.0f), 1e30f},
       }) {
    SCOPED_TRACE(c.name);
    auto opt = Make(c.config, 3);
    // A first, ordinary update gives the state a value to keep.
    std::vector<float> w = {1.0f, -kMax, 2.0f};
    ASSERT_TRUE(opt->Apply({0.5f, 0.5f, 0.5f}, absl::MakeSpan(w)).ok());
    const std::vector<float> before = w;
    std::vector<std::vector<float>> state_before;
    for (const OptimizerStateVector& s : opt->state()) {
      state_before.emplace_back(s.values.begin(), s.values.end());
    }

    ASSERT_TRUE(
        opt->Apply({0.5f, c.huge_gradient, 0.5f}, absl::MakeSpan(w)).ok());
    EXPECT_EQ(opt->incomplete_updates(), 1u);
    EXPECT_EQ(w[1], before[1]);
    EXPECT_NE(w[0], before[0]);  // The others were updated.
    EXPECT_NE(w[2], before[2]);
    for (size_t v = 0; v < state_before.size(); ++v) {
      EXPECT_EQ(opt->state()[v].values[1], state_before[v][1])
          << opt->state()[v].name;
    }
    for (float x : w) EXPECT_TRUE(std::isfinite(x));
  }
}

TEST(OptimizerTest, ParsesKindNames) {
  EXPECT_EQ(*ParseOptimizerKind("sgd"), OptimizerKind::kSgd);
  EXPECT_EQ(*ParseOptimizerKind("adam"), OptimizerKind::kAdam);
  absl::StatusOr<OptimizerKind> bad = ParseOptimizerKind("rmsprop");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rmsprop"), absl::string_view::npos);
}

// The update loops run as whichever vector code the CPU allows (AVX2 or
// the x86-64 baseline); every one must give the bits of the formulas
// evaluated an element at a time, so that runs agree across machines.
TEST(OptimizerTest, GivesTheBitsOfTheFormulasOneElementAtATime) {
  const size_t n = 1003;  // Vector bodies and a scalar tail.
  const float lr = 0.05f, wd = 0.01f, momentum = 0.9f;
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  for (const OptimizerConfig& config :
       {Sgd(lr, 0.0f, wd), Sgd(lr, momentum, wd), Adam(lr, wd)}) {
    std::unique_ptr<Optimizer> opt = Make(config, n);
    std::vector<float> w(n), g(n), expected(n), m(n, 0.0f), v(n, 0.0f);
    for (size_t i = 0; i < n; ++i) w[i] = expected[i] = std::sin(1.0f * i);
    for (int step = 1; step <= 3; ++step) {
      for (size_t i = 0; i < n; ++i) g[i] = std::cos(1.0f * i * (step + 1));
      ASSERT_TRUE(opt->Apply(g, absl::MakeSpan(w), lr).ok());
      const float inv_c1 =
          static_cast<float>(1.0 / (1.0 - std::pow(double{b1}, step)));
      const float inv_c2 =
          static_cast<float>(1.0 / (1.0 - std::pow(double{b2}, step)));
      for (size_t i = 0; i < n; ++i) {
        float& e = expected[i];
        const float gd = g[i] + wd * e;
        if (config.kind == OptimizerKind::kAdam) {
          m[i] = b1 * m[i] + (1.0f - b1) * gd;
          v[i] = b2 * v[i] + (1.0f - b2) * gd * gd;
          e -= lr * (m[i] * inv_c1) / (std::sqrt(v[i] * inv_c2) + eps);
        } else if (config.momentum > 0.0f) {
          m[i] = momentum * m[i] + gd;
          e -= lr * m[i];
        } else {
          e -= lr * gd;
        }
      }
    }
    EXPECT_EQ(0, std::memcmp(w.data(), expected.data(), n * sizeof(float)))
        << OptimizerKindName(config.kind) << " momentum " << config.momentum;
  }
}

TEST(OptimizerTest, PooledUpdateGivesTheSameBitsAsOneThread) {
  // Long enough for several ranges, with a ragged last one.
  const size_t n = 3 * RangePool::kMaxRange + 12345;
  RangePool pool(3);
  for (const OptimizerConfig& config :
       {Sgd(0.1f, 0.0f, 0.01f), Sgd(0.1f, 0.9f, 0.01f), Adam(0.01f, 0.01f)}) {
    std::unique_ptr<Optimizer> serial = Make(config, n);
    std::unique_ptr<Optimizer> pooled = Make(config, n);
    std::vector<float> a(n), b(n), g(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = b[i] = std::sin(static_cast<float>(i));
    }
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < n; ++i) {
        g[i] = std::cos(static_cast<float>(i * (step + 2)));
      }
      ASSERT_TRUE(serial->Apply(g, absl::MakeSpan(a), 0.05f).ok());
      ASSERT_TRUE(pooled->Apply(g, absl::MakeSpan(b), 0.05f, &pool).ok());
    }
    EXPECT_EQ(pooled->update_count(), 3u);
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), n * sizeof(float)));
    std::vector<OptimizerStateVector> sa = serial->state();
    std::vector<OptimizerStateVector> sb = pooled->state();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t v = 0; v < sa.size(); ++v) {
      EXPECT_EQ(0, std::memcmp(sa[v].values.data(), sb[v].values.data(),
                               n * sizeof(float)))
          << sa[v].name;
    }
  }
}

}  // namespace

TEST(OptimizerTest, TheDeclaredOptimizerReplacesDefaultFlags) {
  const OptimizerConfig flags;  // Adam, the servers' defaults.
  const OptimizerSpec declared = OptimizerSpec::Sgd(0.1f, 0.5f, 0.01f);
  absl::StatusOr<OptimizerConfig> resolved =
      ResolveOptimizer(flags, {}, declared, "rank 0");
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(*resolved, declared);
  // Without a declared optimizer, the flags, whichever were given.
  OptimizerFlagsGiven all;
  all.optimizer = all.learning_rate = all.momentum = true;
  resolved = ResolveOptimizer(flags, all, std::nullopt, "rank 0");
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(*resolved, flags);
}

TEST(OptimizerTest, AGivenFlagThatAgreesWithTheDeclarationIsFine) {
  OptimizerConfig flags = Sgd(0.1f, 0.5f, 0.0f);
  OptimizerFlagsGiven given;
  given.optimizer = given.learning_rate = given.momentum = true;
  // beta1 is given but SGD does not use it.
  given.beta1 = true;
  flags.beta1 = 0.3f;
  EXPECT_TRUE(ResolveOptimizer(flags, given,
                               OptimizerSpec::Sgd(0.1f, 0.5f, 0.01f), "rank 0")
                  .ok());
}

TEST(OptimizerTest, AGivenFlagThatSaysOtherwiseIsAnError) {
  struct Case {
    std::function<void(OptimizerConfig&, OptimizerFlagsGiven&)> flag;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](OptimizerConfig& c, OptimizerFlagsGiven& g) {
         c.kind = OptimizerKind::kAdam;
         g.optimizer = true;
       },
       "--optimizer=adam where it declares sgd"},
      {[](OptimizerConfig& c, OptimizerFlagsGiven& g) {
         c.learning_rate = 0.2f;
         g.learning_rate = true;
       },
       "--learning_rate=0.2 where it declares 0.1"},
      {[](OptimizerConfig& c, OptimizerFlagsGiven& g) {
         c.momentum = 0.0f;
         g.momentum = true;
       },
       "--momentum=0 where it declares 0.9"},
      {[](OptimizerConfig& c, OptimizerFlagsGiven& g) {
         c.weight_decay = 0.5f;
         g.weight_decay = true;
       },
       "--weight_decay=0.5 where it declares 0"},
  };
  for (const Case& c : cases) {
    OptimizerConfig flags = Sgd(0.1f, 0.9f, 0.0f);
    OptimizerFlagsGiven given;
    c.flag(flags, given);
    absl::StatusOr<OptimizerConfig> resolved = ResolveOptimizer(
        flags, given, OptimizerSpec::Sgd(0.1f, 0.9f), "rank 0");
    ASSERT_FALSE(resolved.ok()) << c.message;
    EXPECT_EQ(resolved.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(resolved.status().message().find(c.message), std::string::npos)
        << resolved.status();
    EXPECT_NE(resolved.status().message().find(
                  "rank 0 declares the optimizer sgd(learning_rate 0.1"),
              std::string::npos)
        << resolved.status();
  }
  // Adam's own fields.
  OptimizerConfig flags = Adam(0.1f, 0.0f);
  flags.beta2 = 0.9f;
  OptimizerFlagsGiven given;
  given.beta2 = true;
  absl::StatusOr<OptimizerConfig> resolved =
      ResolveOptimizer(flags, given, OptimizerSpec::Adam(0.1f), "rank 0");
  ASSERT_FALSE(resolved.ok());
  EXPECT_NE(resolved.status().message().find("--beta2=0.9 where it declares "
                                             "0.999"),
            std::string::npos)
      << resolved.status();
}

}  // namespace ps::update
