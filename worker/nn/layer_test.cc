// Every layer against finite differences of a double-precision reference
// (reference_net.h), with tolerances derived from the arithmetic rather than
// measured on one CPU:
//
// - A float result that is a k-term sum may be off by (k + 3) roundings
//   (unit 2^-24) of the sum of its terms' absolute values, whatever the
//   order or FMA use (as in kernels/cnn_conformance.cc). That sum is the
//   same derivative taken on the problem with every input, parameter and
//   upstream gradient replaced by its absolute value: every layer here is
//   linear in each single input (ReLU and max pooling piecewise so).
// - Central differences of L = sum(g * y) are exact for such functions as
//   long as the step crosses no kink (ReLU inputs are kept away from 0, max
//   pooling inputs distinct by more than twice the step), up to double
//   rounding: (fan-in + outputs + 2) units of 2^-53 of L's absolute sum,
//   divided by the step.

#include "worker/nn/layer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "worker/nn/model_description.h"
#include "worker/nn/reference_net.h"

namespace ps::worker::nn {
namespace {

namespace ref = ::ps::worker::nn::testing;
using ::ps::kernels::DeviceBuffer;
using ::ps::kernels::testing::Download;
using ::ps::kernels::testing::Upload;
using ::ps::worker::nn::testing::Roundings;
using ::ps::worker::nn::testing::RoundingsOf;

constexpr double kFloatUnit = 0x1p-24;
constexpr double kDoubleUnit = 0x1p-53;
constexpr double kStep = 0x1p-6;  // Exact in float and double.
constexpr uint64_t kDropoutSeed = 77;

enum class Inputs {
  kUniform,           // In [-1, 1].
  kAwayFromZero,      // |x| in [0.25, 1]: no ReLU kink within kStep.
  kDistinctPositive,  // Multiples of 1/8, all different: no ties in a
                      // window within 2 kStep, and |x| = x.
};

struct LayerCase {
  std::string input;  // "3x7x6"
  std::string item;   // "conv 4 3x3 pad 1"
  int batch = 2;
  Inputs inputs = Inputs::kUniform;
  bool training = true;
};

// The layer's function in double, L = sum(g * y) over a batch.
struct Problem {
  LayerConfig config;
  ActivationShape in, out;
  Pass pass;
  std::vector<double> x;
  ref::Params params;
  std::vector<double> g;

  std::vector<double> Forward() const {
    return ref::LayerForward(config, in, out, pass, kDropoutSeed, x, params);
  }
  double Loss() const {
    const std::vector<double> y = Forward();
    return std::inner_product(y.begin(), y.end(), g.begin(), 0.0);
  }
  std::vector<double>& Tensor(int t) { return t == 0 ? x : params[t - 1]; }

  // The same problem on absolute values: its derivatives are the sums of
  // absolute terms that bound rounding.
  Problem Abs() const {
    Problem a = *this;
    for (int t = 0; t <= static_cast<int>(params.size()); ++t) {
      for (double& v : a.Tensor(t)) v = std::abs(v);
    }
    for (double& v : a.g) v = std::abs(v);
    return a;
  }

  // dL/d(tensor t), by central differences.
  std::vector<double> FiniteDifferences(int t) const {
    Problem p = *this;
    std::vector<double>& values = p.Tensor(t);
    std::vector<double> derivative(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const double saved = values[i];
      values[i] = saved + kStep;
      const double up = p.Loss();
      values[i] = saved - kStep;
      const double down = p.Loss();
      values[i] = saved;
      derivative[i] = (up - down) / (2 * kStep);
    }
    return derivative;
  }
};

::testing::AssertionResult WithinBounds(absl::Span<const float> got,
                                        absl::Span<const double> want,
                                        absl::Span<const double> bound) {
  if (got.size() != want.size() || got.size() != bound.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << got.size() << ", " << want.size() << ", "
           << bound.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(got[i] - want[i]);
    if (!(diff <= bound[i])) {  // NaN fails.
      return ::testing::AssertionFailure()
             << "element " << i << " of " << got.size() << ": got " << got[i]
             << ", want " << want[i] << ", off by " << diff << " > "
             << bound[i];
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<double> MakeInputs(Inputs kind, size_t n, uint64_t seed) {
  std::vector<double> x = ref::Uniform(n, seed);
  if (kind == Inputs::kAwayFromZero) {
    for (double& v : x) v = (v < 0 ? -1 : 1) * (0.25 + 0.75 * std::abs(v));
  } else if (kind == Inputs::kDistinctPositive) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return x[a] < x[b]; });
    for (size_t rank = 0; rank < n; ++rank) x[order[rank]] = (rank + 1) / 8.0;
  }
  // The layer sees floats: the reference must see the same values.
  for (double& v : x) v = static_cast<float>(v);
  return x;
}

std::vector<float> ToFloat(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// The layer of a case, with its shapes, as a description would build it.
Problem Describe(const LayerCase& c) {
  absl::StatusOr<ModelDescription> d = ModelDescription::Parse(
      absl::StrCat("input ", c.input, "; ", c.item, "; flatten; dense 1"));
  EXPECT_TRUE(d.ok()) << d.status();
  Problem p;
  p.config = d->layers()[0];
  p.in = d->input();
  p.out = d->output_shapes()[0];
  p.pass.batch = c.batch;
  p.pass.training = c.training;
  p.pass.step = 5;
  p.pass.first_example = 3;
  return p;
}

class LayerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PS_ASSERT_OK_AND_ASSIGN(backend_, kernels::CreateCpuBackend());
  }

  void CheckAgainstFiniteDifferences(const LayerCase& c, uint64_t seed) {
    SCOPED_TRACE(absl::StrCat(c.item, " on ", c.batch, " x ", c.input,
                              c.training ? "" : " (evaluation)"));
    Problem p = Describe(c);
    LayerOptions options;
    options.max_batch = c.batch + 1;  // Passes use their own batch.
    options.dropout_seed = kDropoutSeed;
    PS_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<Layer> layer,
        CreateLayer(p.config, p.in, options, backend_.get()));
    ASSERT_EQ(layer->output_shape(), p.out);
    p.x = MakeInputs(c.inputs, c.batch * p.in.size(), seed);
    p.g = ref::Uniform(c.batch * p.out.size(), seed + 1);
    for (int i = 0; i < layer->num_parameters(); ++i) {
      p.params.push_back(
          ref::Uniform(layer->parameter(i).size(), seed + 2 + i));
      const std::vector<float> values = ToFloat(p.params.back());
      PS_ASSERT_OK(backend_->CopyToDevice(values.data(), values.size(),
                                          layer->parameter(i), 0));
    }
    const Problem abs = p.Abs();
    const Roundings r = RoundingsOf(p.config, p.in, p.out, c.batch, c.training);

    PS_ASSERT_OK_AND_ASSIGN(auto x, Upload(*backend_, ToFloat(p.x)));
    PS_ASSERT_OK_AND_ASSIGN(const DeviceBuffer* y, layer->Forward(p.pass, *x));
    std::vector<float> got(c.batch * p.out.size());
    PS_ASSERT_OK(backend_->CopyToHost(*y, 0, got.size(), got.data()));
    const std::vector<double> magnitude = abs.Forward();
    std::vector<double> bound(got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      bound[i] =
          (r.forward * kFloatUnit + r.fan_in * kDoubleUnit) * magnitude[i];
    }
    EXPECT_TRUE(WithinBounds(got, p.Forward(), bound)) << "forward";

    PS_ASSERT_OK_AND_ASSIGN(auto g, Upload(*backend_, ToFloat(p.g)));
    std::vector<int> ready;
    PS_ASSERT_OK_AND_ASSIGN(const DeviceBuffer* grad_x,
                            layer->Backward(p.pass, *x, *g, true, [&](int i) {
                              ready.push_back(i);
                              return absl::OkStatus();
                            }));
    const std::vector<int> bias_then_weight = {1, 0};
    EXPECT_EQ(ready, layer->num_parameters() == 2 ? bias_then_weight
                                                  : std::vector<int>());
    // Rounding of L itself, in the reference, over the step.
    const double fd_error =
        (r.fan_in + p.g.size() + 2) * kDoubleUnit * abs.Loss() / kStep;
    for (int t = 0; t <= layer->num_parameters(); ++t) {
      SCOPED_TRACE(t == 0 ? std::string("d/dx")
                          : absl::StrCat("d/d parameter ", t - 1));
      std::vector<float> gradient(t == 0 ? p.x.size() : p.params[t - 1].size());
      PS_ASSERT_OK(backend_->CopyToHost(
          t == 0 ? *grad_x : layer->parameter_gradient(t - 1), 0,
          gradient.size(), gradient.data()));
      const double roundings = t == 0 ? r.grad_x : r.parameters[t - 1];
      const std::vector<double> abs_derivative = abs.FiniteDifferences(t);
      std::vector<double> bound(gradient.size());
      for (size_t i = 0; i < gradient.size(); ++i) {
        bound[i] = roundings * kFloatUnit * abs_derivative[i] + fd_error;
      }
      EXPECT_TRUE(WithinBounds(gradient, p.FiniteDifferences(t), bound));
    }
  }

  std::unique_ptr<kernels::Backend> backend_;
};

TEST_F(LayerTest, DenseMatchesFiniteDifferences) {
  CheckAgainstFiniteDifferences({"7", "dense 5", 3}, 1);
  CheckAgainstFiniteDifferences({"1", "dense 1", 1}, 2);
  CheckAgainstFiniteDifferences({"40", "dense 3", 4}, 3);
}

TEST_F(LayerTest, ConvMatchesFiniteDifferences) {
  CheckAgainstFiniteDifferences({"3x7x6", "conv 4 3x3 pad 1", 2}, 10);
  CheckAgainstFiniteDifferences({"2x9x8", "conv 3 3x2 stride 2 pad 1x0", 2},
                                11);
  CheckAgainstFiniteDifferences({"5x4x6", "conv 3 1x1", 3}, 12);
  // The kernel covers the whole padded image.
  CheckAgainstFiniteDifferences({"2x3x3", "conv 3 5x5 pad 1", 2}, 13);
  // Stride 3 leaves rows and columns unread: their gradient is 0.
  CheckAgainstFiniteDifferences({"2x10x7", "conv 2 4x4 stride 3 pad 2", 1}, 14);
}

TEST_F(LayerTest, MaxPoolMatchesFiniteDifferences) {
  const Inputs distinct = Inputs::kDistinctPositive;
  CheckAgainstFiniteDifferences({"2x6x6", "maxpool 2", 2, distinct}, 20);
  // Overlapping windows add their gradients.
  CheckAgainstFiniteDifferences({"2x7x7", "maxpool 3 stride 2", 2, distinct},
                                21);
  CheckAgainstFiniteDifferences({"1x7x8", "maxpool 2x3 stride 3", 3, distinct},
                                22);
}

TEST_F(LayerTest, AvgPoolMatchesFiniteDifferences) {
  CheckAgainstFiniteDifferences({"2x6x6", "avgpool 2", 2}, 30);
  CheckAgainstFiniteDifferences({"2x7x7", "avgpool 3 stride 2", 2}, 31);
  CheckAgainstFiniteDifferences({"1x7x8", "avgpool 2x3 stride 3", 3}, 32);
}

TEST_F(LayerTest, ReluMatchesFiniteDifferences) {
  CheckAgainstFiniteDifferences({"3x4x5", "relu", 2, Inputs::kAwayFromZero},
                                40);
  CheckAgainstFiniteDifferences({"6", "relu", 3, Inputs::kAwayFromZero}, 41);
}

TEST_F(LayerTest, FlattenMatchesFiniteDifferences) {
  CheckAgainstFiniteDifferences({"2x3x3", "flatten", 2}, 50);
}

TEST_F(LayerTest, DropoutMatchesFiniteDifferences) {
  CheckAgainstFiniteDifferences({"4x3x3", "dropout 0.5", 3}, 60);
  // 1 / 0.7 is not a float: the kernels' rounded scale is the definition.
  CheckAgainstFiniteDifferences({"10", "dropout 0.3", 4}, 61);
  CheckAgainstFiniteDifferences({"10", "dropout 0.3", 4, Inputs::kUniform,
                                 /*training=*/false},
                                62);
}

TEST_F(LayerTest, DropoutMaskFollowsTheExampleNotTheBatch) {
  Problem p = Describe({"2x2x3", "dropout 0.5", 4});
  LayerOptions options;
  options.max_batch = 4;
  options.dropout_seed = kDropoutSeed;
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Layer> layer,
                          CreateLayer(p.config, p.in, options, backend_.get()));
  const std::vector<float> x = ToFloat(ref::Uniform(4 * 12, 1, 0.5, 1.0));
  auto run = [&](size_t first, int batch, uint64_t step) {
    Pass pass;
    pass.batch = batch;
    pass.training = true;
    pass.step = step;
    pass.first_example = first;
    std::vector<float> out(batch * 12);
    auto dx =
        Upload(*backend_, absl::MakeSpan(x).subspan(first * 12, out.size()));
    EXPECT_TRUE(dx.ok());
    absl::StatusOr<const DeviceBuffer*> y = layer->Forward(pass, **dx);
    EXPECT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(backend_->CopyToHost(**y, 0, out.size(), out.data()).ok());
    return out;
  };
  // One worker with 4 examples, or two with 2 each at their offsets.
  std::vector<float> whole = run(0, 4, 9);
  std::vector<float> halves = run(0, 2, 9);
  const std::vector<float> second = run(2, 2, 9);
  halves.insert(halves.end(), second.begin(), second.end());
  EXPECT_EQ(whole, halves);
  const int dropped = std::count(whole.begin(), whole.end(), 0.0f);
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, 48);
  EXPECT_NE(run(0, 4, 10), whole);  // A new mask each step.

  // Outside training, the input itself, both ways.
  PS_ASSERT_OK_AND_ASSIGN(auto dx, Upload(*backend_, x));
  Pass eval;
  eval.batch = 4;
  PS_ASSERT_OK_AND_ASSIGN(const DeviceBuffer* y, layer->Forward(eval, *dx));
  EXPECT_EQ(y, dx.get());
  PS_ASSERT_OK_AND_ASSIGN(const DeviceBuffer* grad_x,
                          layer->Backward(eval, *dx, *dx, true, [](int) {
                            return absl::OkStatus();
                          }));
  EXPECT_EQ(grad_x, dx.get());
}

TEST_F(LayerTest, FirstLayersNeedNoInputGradient) {
  Problem p = Describe({"1x5x5", "conv 2 3x3", 2});
  LayerOptions options;
  options.max_batch = 2;
  options.input_gradient = false;
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Layer> layer,
                          CreateLayer(p.config, p.in, options, backend_.get()));
  PS_ASSERT_OK_AND_ASSIGN(auto x, Upload(*backend_, std::vector<float>(50)));
  PS_ASSERT_OK_AND_ASSIGN(auto g, Upload(*backend_, std::vector<float>(36)));
  p.pass.training = false;
  PS_ASSERT_OK(layer->Forward(p.pass, *x).status());
  int reported = 0;
  auto ready = [&](int) {
    ++reported;
    return absl::OkStatus();
  };
  PS_ASSERT_OK_AND_ASSIGN(const DeviceBuffer* none,
                          layer->Backward(p.pass, *x, *g, false, ready));
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(reported, 2);
  EXPECT_EQ(layer->Backward(p.pass, *x, *g, true, ready).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(LayerTest, AnErrorFromReadyStopsBackward) {
  Problem p = Describe({"4", "dense 3", 1});
  PS_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Layer> layer,
      CreateLayer(p.config, p.in, LayerOptions(), backend_.get()));
  PS_ASSERT_OK_AND_ASSIGN(auto x, Upload(*backend_, std::vector<float>(4)));
  PS_ASSERT_OK_AND_ASSIGN(auto g, Upload(*backend_, std::vector<float>(3)));
  p.pass.batch = 1;
  PS_ASSERT_OK(layer->Forward(p.pass, *x).status());
  std::vector<int> reported;
  const absl::Status status =
      layer
          ->Backward(p.pass, *x, *g, true,
                     [&](int i) {
                       reported.push_back(i);
                       return absl::UnavailableError("push failed");
                     })
          .status();
  EXPECT_EQ(status, absl::UnavailableError("push failed"));
  EXPECT_EQ(reported, std::vector<int>{1});
}

TEST_F(LayerTest, CreateLayerRefusesWhatDoesNotFit) {
  Problem p = Describe({"1x5x5", "conv 2 3x3", 1});
  const absl::Status too_small =
      CreateLayer(p.config, {1, 2, 2}, LayerOptions(), backend_.get()).status();
  EXPECT_EQ(too_small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_small.message().find("3x3 kernel is larger than its 2x2"),
            std::string::npos)
      << too_small;
  Problem dense = Describe({"4", "dense 3", 1});
  EXPECT_EQ(CreateLayer(dense.config, {4, 2, 1}, LayerOptions(), backend_.get())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateLayer(dense.config, dense.in, LayerOptions(), nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  LayerOptions no_batch;
  no_batch.max_batch = 0;
  EXPECT_EQ(CreateLayer(dense.config, dense.in, no_batch, backend_.get())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Softmax cross-entropy is not piecewise linear: the differences' step
// error is bounded by the third derivative of log-sum-exp, p(1-p)(1-2p) <
// 0.1 per row, divided by the batch: h^2 / 6 * 0.1 / batch. A float
// implementation rounds the shifted logits (|z - max| units of 2^-24 on
// p), the exponentials and the sum (classes + 6 units) and the final
// subtraction and division (2 units of |gradient|).
TEST_F(LayerTest, SoftmaxCrossEntropyMatchesFiniteDifferences) {
  constexpr double kSoftStep = 0x1p-12;
  for (const auto& [batch, classes] :
       {std::pair{1, 2}, std::pair{3, 5}, std::pair{4, 10}}) {
    SCOPED_TRACE(absl::StrCat(batch, " x ", classes));
    PS_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<SoftmaxCrossEntropyLoss> loss,
        SoftmaxCrossEntropyLoss::Create(classes, batch + 2, backend_.get()));
    std::vector<double> z = ref::Uniform(batch * classes, classes, -4, 4);
    std::vector<float> labels;
    for (double u : ref::Uniform(batch, classes + 1, 0, classes - 0.01)) {
      labels.push_back(std::floor(u));
    }
    PS_ASSERT_OK_AND_ASSIGN(auto logits, Upload(*backend_, ToFloat(z)));
    PS_ASSERT_OK_AND_ASSIGN(float got, loss->Forward(batch, *logits, labels));
    std::vector<float> gradient(batch * classes);
    PS_ASSERT_OK(backend_->CopyToHost(loss->gradient(), 0, gradient.size(),
                                      gradient.data()));

    const double want = ref::SoftmaxCrossEntropy(batch, classes, z, labels);
    // Per row: the magnitudes a float log-sum-exp works with.
    double scale = 0;
    std::vector<double> row_max(batch), row_lse(batch);
    for (int r = 0; r < batch; ++r) {
      const double* row = z.data() + r * classes;
      row_max[r] = *std::max_element(row, row + classes);
      double sum = 0;
      for (int c = 0; c < classes; ++c) sum += std::exp(row[c] - row_max[r]);
      row_lse[r] = row_max[r] + std::log(sum);
      scale += 2 * std::abs(row_max[r]) + std::abs(row_lse[r]) + 1 +
               std::abs(row[static_cast<int>(labels[r])]);
    }
    scale /= batch;
    EXPECT_NEAR(got, want, (classes + 8) * kFloatUnit * scale);

    const double fd_error = kSoftStep * kSoftStep / 6 * 0.1 / batch +
                            (classes + 8) * kDoubleUnit * scale / kSoftStep;
    std::vector<double> numeric(z.size()), bound(z.size());
    for (size_t i = 0; i < z.size(); ++i) {
      const double saved = z[i];
      z[i] = saved + kSoftStep;
      const double up = ref::SoftmaxCrossEntropy(batch, classes, z, labels);
      z[i] = saved - kSoftStep;
      const double down = ref::SoftmaxCrossEntropy(batch, classes, z, labels);
      z[i] = saved;
      numeric[i] = (up - down) / (2 * kSoftStep);
      const int r = i / classes;
      const double p = std::exp(z[i] - row_lse[r]);
      bound[i] =
          kFloatUnit *
              (p * (2 * std::abs(z[i] - row_max[r]) + classes + 8) / batch +
               2 * std::abs(numeric[i])) +
          fd_error;
    }
    EXPECT_TRUE(WithinBounds(gradient, numeric, bound));
  }
  EXPECT_EQ(
      SoftmaxCrossEntropyLoss::Create(0, 1, backend_.get()).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::worker::nn
