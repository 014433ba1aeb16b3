#include "update/optimizer.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps::update {
namespace {

// The update loops are bound by memory traffic, and AVX2's 256-bit loads
// and stores move it faster (16 MiB rounds ~5%, bench/README.md), so on
// x86-64 each loop is compiled twice, for AVX2 and for the baseline, and the
// loader picks one for the CPU. Neither uses FMA and the operations are
// elementwise IEEE ones, so both give the same bits.
#if defined(__x86_64__) && defined(__GNUC__)
#define PS_UPDATE_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define PS_UPDATE_LOOP
#endif

// Each loop keeps an element's weight and state as they were where its
// update would make any of them NaN or infinite, and returns whether it kept
// any: finite gradients can still overflow, and one non-finite weight would
// spread to every later update. A select, not a branch, so the loops still
// vectorize; finite results are the same bits as without it. (A count of the
// kept elements costs a third of the loop when its data is in cache.)
inline bool Finite(float x) {
  return std::abs(x) <= std::numeric_limits<float>::max();  // NaN: false.
}

// `ok ? updated : old` as bit operations. Written as a conditional, GCC
// turns the store into a masked store (the old value is what the element
// holds already), which is several times slower than a plain one (Adam's
// loop ran at a third of its speed on AMD EPYC).
inline float Select(bool ok, float updated, float old) {
  uint32_t a;
  uint32_t b;
  std::memcpy(&a, &updated, sizeof(a));
  std::memcpy(&b, &old, sizeof(b));
  const uint32_t mask = 0u - static_cast<uint32_t>(ok);
  const uint32_t bits = (a & mask) | (b & ~mask);
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

// w -= lr * (g + wd * w).
PS_UPDATE_LOOP bool SgdLoop(EncodedFloats grad, float* w, size_t n, float lr,
                            float wd) {
  uint32_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const float w0 = w[i];
    const float next = w0 - lr * (grad[i] + wd * w0);
    const bool ok = Finite(next);
    w[i] = Select(ok, next, w0);
    kept |= !ok;
  }
  return kept != 0;
}

// g' = g + wd * w;  v = momentum * v + g';  w -= lr * v.
PS_UPDATE_LOOP bool MomentumLoop(EncodedFloats grad, float* w, float* velocity,
                                 size_t n, float lr, float wd, float momentum) {
  uint32_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const float w0 = w[i];
    const float v0 = velocity[i];
    const float g = grad[i] + wd * w0;
    const float v = momentum * v0 + g;
    const float next = w0 - lr * v;
    const bool ok = Finite(v) & Finite(next);
    velocity[i] = Select(ok, v, v0);
    w[i] = Select(ok, next, w0);
    kept |= !ok;
  }
  return kept != 0;
}

// Adam's constants for one update: inv_c1 and inv_c2 are the reciprocals of
// its bias corrections (multiplying by them costs a third of dividing).
struct AdamStep {
  float lr, wd, b1, b2, eps, inv_c1, inv_c2;
};

PS_UPDATE_LOOP bool AdamLoop(EncodedFloats grad, float* w, float* m, float* v,
                             size_t n, AdamStep step) {
  uint32_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const float w0 = w[i];
    const float m0 = m[i];
    const float v0 = v[i];
    const float g = grad[i] + step.wd * w0;
    const float m_next = step.b1 * m0 + (1.0f - step.b1) * g;
    const float v_next = step.b2 * v0 + (1.0f - step.b2) * g * g;
    const float m_hat = m_next * step.inv_c1;
    const float v_hat = v_next * step.inv_c2;
    const float next = w0 - step.lr * m_hat / (std::sqrt(v_hat) + step.eps);
    const bool ok = Finite(m_next) & Finite(v_next) & Finite(next);
    m[i] = Select(ok, m_next, m0);
    v[i] = Select(ok, v_next, v0);
    w[i] = Select(ok, next, w0);
    kept |= !ok;
  }
  return kept != 0;
}

// w = g: the pushes' mean is the value itself (a buffer).
PS_UPDATE_LOOP bool AssignLoop(EncodedFloats values, float* w, size_t n) {
  uint32_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const float w0 = w[i];
    const float next = values[i];
    const bool ok = Finite(next);
    w[i] = Select(ok, next, w0);
    kept |= !ok;
  }
  return kept != 0;
}

#undef PS_UPDATE_LOOP

// Plain SGD when momentum is 0, else heavy-ball momentum:
//   g' = g + wd * w;  v = momentum * v + g';  w -= lr * v.
class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(const OptimizerConfig& config, size_t n)
      : Optimizer(n, config.learning_rate),
        momentum_(config.momentum),
        weight_decay_(config.weight_decay),
        velocity_(config.momentum > 0.0f ? n : 0, 0.0f) {}

  std::vector<OptimizerStateVector> state() override {
    if (velocity_.empty()) return {};
    return {{"momentum", absl::MakeSpan(velocity_)}};
  }

 private:
  bool Update(EncodedFloats grad, absl::Span<float> weights, float lr,
              size_t begin) override {
    // Raw pointers and values: Span's checked operator[] and stores that
    // could alias the members would stop the compiler vectorizing.
    if (velocity_.empty()) {
      return SgdLoop(grad, weights.data(), weights.size(), lr, weight_decay_);
    }
    return MomentumLoop(grad, weights.data(), velocity_.data() + begin,
                        weights.size(), lr, weight_decay_, momentum_);
  }

  const float momentum_;
  const float weight_decay_;
  std::vector<float> velocity_;
};

// Adam (Kingma & Ba) with L2 weight decay added to the gradient, bias
// correction from this slice's own update count t:
//   m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;
//   w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(const OptimizerConfig& config, size_t n)
      : Optimizer(n, config.learning_rate),
        beta1_(config.beta1),
        beta2_(config.beta2),
        epsilon_(config.epsilon),
        weight_decay_(config.weight_decay),
        m_(n, 0.0f),
        v_(n, 0.0f) {}

  std::vector<OptimizerStateVector> state() override {
    return {{"m", absl::MakeSpan(m_)}, {"v", absl::MakeSpan(v_)}};
  }

 private:
  bool Update(EncodedFloats grad, absl::Span<float> weights, float lr,
              size_t begin) override {
    // Corrections in double: 1 - b2^t is tiny for small t and float loses it.
    const double t = static_cast<double>(update_count());
    const float inv_c1 =
        static_cast<float>(1.0 / (1.0 - std::pow(double{beta1_}, t)));
    const float inv_c2 =
        static_cast<float>(1.0 / (1.0 - std::pow(double{beta2_}, t)));
    return AdamLoop(
        grad, weights.data(), m_.data() + begin, v_.data() + begin,
        weights.size(),
        {lr, weight_decay_, beta1_, beta2_, epsilon_, inv_c1, inv_c2});
  }

  const float beta1_;
  const float beta2_;
  const float epsilon_;
  const float weight_decay_;
  std::vector<float> m_;
  std::vector<float> v_;
};

// TensorSpec::assigned: each update sets the weights to the pushed values
// (a sync step's weighted mean of the ranks' values); no learning rate, no
// state.
class Assignment final : public Optimizer {
 public:
  explicit Assignment(size_t n) : Optimizer(n, 0.0f) {}

  std::vector<OptimizerStateVector> state() override { return {}; }

 private:
  bool Update(EncodedFloats values, absl::Span<float> weights, float,
              size_t) override {
    return AssignLoop(values, weights.data(), weights.size());
  }
};

}  // namespace

absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adam") return OptimizerKind::kAdam;
  return absl::InvalidArgumentError(absl::StrCat(
      "--optimizer must be \"sgd\" or \"adam\", got \"", name, "\""));
}

absl::Status ValidateOptimizerConfig(const OptimizerConfig& config) {
  return ValidateOptimizerSpec(config, "--");
}

absl::StatusOr<OptimizerConfig> ResolveOptimizer(
    const OptimizerConfig& flags, const OptimizerFlagsGiven& given,
    const std::optional<OptimizerSpec>& declared,
    absl::string_view declared_by) {
  if (!declared.has_value()) return flags;
  const OptimizerSpec& d = *declared;
  const bool sgd = d.kind == OptimizerKind::kSgd;
  std::vector<std::string> differences;
  auto check = [&](bool flag_given, bool used, absl::string_view flag,
                   float flag_value, float declared_value) {
    if (flag_given && used && flag_value != declared_value) {
      differences.push_back(absl::StrCat(
          "--", flag, "=", flag_value, " where it declares ", declared_value));
    }
  };
  if (given.optimizer && flags.kind != d.kind) {
    differences.push_back(
        absl::StrCat("--optimizer=", OptimizerKindName(flags.kind),
                     " where it declares ", OptimizerKindName(d.kind)));
  }
  check(given.learning_rate, true, "learning_rate", flags.learning_rate,
        d.learning_rate);
  check(given.weight_decay, true, "weight_decay", flags.weight_decay,
        d.weight_decay);
  check(given.momentum, sgd, "momentum", flags.momentum, d.momentum);
  check(given.beta1, !sgd, "beta1", flags.beta1, d.beta1);
  check(given.beta2, !sgd, "beta2", flags.beta2, d.beta2);
  check(given.epsilon, !sgd, "epsilon", flags.epsilon, d.epsilon);
  if (differences.empty()) return d;
  return absl::FailedPreconditionError(absl::StrCat(
      declared_by, " declares the optimizer ", DescribeOptimizer(d),
      ", but this server was started with ", absl::StrJoin(differences, ", "),
      ": start the servers without those flags (the declaration sets the "
      "optimizer) or with the declared values"));
}

absl::Status Optimizer::Apply(absl::Span<const float> gradient,
                              absl::Span<float> weights) {
  return Apply(gradient, weights, learning_rate_);
}

absl::Status Optimizer::Apply(absl::Span<const float> gradient,
                              absl::Span<float> weights, float learning_rate,
                              RangePool* pool) {
  if (gradient.size() != num_elements_) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer for ", num_elements_,
                     " elements got a gradient of ", gradient.size()));
  }
  return Apply(
      [gradient](uint64_t begin, absl::Span<char> scratch) {
        return EncodedView(
            gradient.subspan(begin, scratch.size() / sizeof(float)), scratch);
      },
      weights, learning_rate, pool);
}

absl::Status Optimizer::Apply(GradientReader gradient,
                              absl::Span<float> weights, float learning_rate,
                              RangePool* pool) {
  if (!std::isfinite(learning_rate) || learning_rate < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "learning rate ", learning_rate, " is not finite and >= 0"));
  }
  if (weights.size() != num_elements_) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer for ", num_elements_,
                     " elements got weights of ", weights.size(), " elements"));
  }
  ++update_count_;
  // Every state is per element, so cutting the slice into ranges and runs
  // changes no bit.
  std::atomic<bool> kept{false};
  auto update_range = [&](size_t begin, size_t end) {
    char scratch[kGradientBlock * sizeof(float)];
    bool range_kept = false;
    for (size_t b = begin; b < end;) {
      const size_t most = std::min(kGradientBlock, end - b);
      const EncodedFloats g =
          gradient(b, absl::MakeSpan(scratch, most * sizeof(float)));
      assert(g.size() >= 1 && g.size() <= most);
      range_kept |= Update(g, weights.subspan(b, g.size()), learning_rate, b);
      b += g.size();
    }
    if (range_kept) kept.store(true, std::memory_order_relaxed);
  };
  if (pool == nullptr) {
    update_range(0, num_elements_);
  } else {
    pool->ForEachRange(num_elements_, update_range);
  }
  if (kept.load(std::memory_order_relaxed)) ++incomplete_updates_;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerConfig& config, size_t num_elements) {
  if (absl::Status s = ValidateOptimizerConfig(config); !s.ok()) return s;
  if (config.kind == OptimizerKind::kSgd) {
    return std::make_unique<SgdOptimizer>(config, num_elements);
  }
  return std::make_unique<AdamOptimizer>(config, num_elements);
}

std::unique_ptr<Optimizer> CreateAssignment(size_t num_elements) {
  return std::make_unique<Assignment>(num_elements);
}

}  // namespace ps::update
