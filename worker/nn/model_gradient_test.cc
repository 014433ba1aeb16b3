// Whole networks (layers wired by the Model, dropout on, every kind of
// layer) against finite differences of the double-precision reference
// network, with a bound derived from the arithmetic:
//
// - With the decisions of ReLU and max pooling fixed, the network is
//   linear in each single parameter. Its float rounding errors, to first
//   order, are each op's bound (reference_net.h's Roundings: units of 2^-24
//   of the sum of absolute terms) carried to the gradient through the
//   network with every weight, input and upstream gradient replaced by its
//   absolute value: M(v)_i = d/d theta_i of sum_k v_k * zhat_k, where zhat
//   are the logits of that absolute network, linear in each parameter, so
//   its central differences are exact. Summing over every op gives
//   u * K * M(|G|) for the d(loss)/d(logits) G, plus M(dG) for G's own
//   error: softmax rounding and the logits' forward error through the
//   softmax Jacobian. Doubled, to cover higher-order terms (u * K << 1).
// - The float forward must take the reference's decisions: every ReLU input
//   and every max-pooling gap is checked to exceed twice its forward error
//   bound, else the seed is refused (ties between a ReLU's exact zeros
//   excepted: both sides pick the first, and its gradient is dropped).
// - Central differences of the loss: the logits are affine in one
//   parameter (decisions fixed, checked at both ends of each step), so the
//   step error is h^2 / 6 * max|d^3 loss| <= h^2 / 6 * (2 V)^3, V the
//   largest logit sensitivity (bounded by the absolute network), plus the
//   double rounding of the loss over h.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "worker/nn/model.h"
#include "worker/nn/model_description.h"
#include "worker/nn/reference_net.h"

namespace ps::worker::nn {
namespace {

namespace ref = ::ps::worker::nn::testing;

constexpr double kUnit = 0x1p-24;
constexpr double kDoubleUnit = 0x1p-53;
constexpr double kStep = 0x1p-14;
constexpr uint64_t kModelSeed = 5;

std::vector<double> Abs(std::vector<double> v) {
  for (double& e : v) e = std::abs(e);
  return v;
}

class ModelGradientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PS_ASSERT_OK_AND_ASSIGN(backend_, kernels::CreateCpuBackend());
  }

  // Checks that every float-forward decision of `base` is safe: see the
  // top of the file. `abs` is the absolute network at the same decisions.
  void CheckDecisionMargins(const ModelDescription& d,
                            const std::vector<ref::Roundings>& r,
                            const ref::Trace& base, const ref::Trace& abs) {
    double forward_error = 0;  // Units, of the layer's input.
    ActivationShape in = d.input();
    for (size_t l = 0; l < d.layers().size(); ++l) {
      const LayerConfig& c = d.layers()[l];
      const std::vector<double>& x = base.inputs[l];
      const std::vector<double>& xhat = abs.inputs[l];
      const double slack = 2 * kUnit * forward_error;
      if (c.kind == LayerKind::kRelu) {
        for (size_t e = 0; e < x.size(); ++e) {
          ASSERT_GT(std::abs(x[e]), slack * xhat[e])
              << "layer " << l << " element " << e << ": pick another seed";
        }
      }
      if (c.kind == LayerKind::kMaxPool) {
        const ActivationShape& out = d.output_shapes()[l];
        const std::vector<int64_t>& chosen = base.decisions[l];
        for (size_t o = 0; o < chosen.size(); ++o) {
          const int64_t j = o % out.width, i = (o / out.width) % out.height;
          const int64_t plane =
              o / (out.width * out.height) * in.height * in.width;
          for (int u = 0; u < c.kernel_height; ++u) {
            for (int v = 0; v < c.kernel_width; ++v) {
              const int64_t e = plane + (i * c.stride_height + u) * in.width +
                                j * c.stride_width + v;
              if (e == chosen[o]) continue;
              // Zeros from a ReLU are exact: float and reference both take
              // the first, whose gradient the ReLU then drops anyway.
              const bool relu_zeros =
                  l > 0 && d.layers()[l - 1].kind == LayerKind::kRelu &&
                  x[chosen[o]] == 0 && x[e] == 0;
              if (relu_zeros) continue;
              ASSERT_GT(x[chosen[o]] - x[e],
                        slack * (xhat[chosen[o]] + xhat[e]))
                  << "layer " << l << " output " << o << ": pick another seed";
            }
          }
        }
      }
      forward_error += r[l].forward;
      in = d.output_shapes()[l];
    }
  }

  void CheckNetwork(const std::string& text, int batch, uint64_t seed) {
    SCOPED_TRACE(absl::StrCat(text, ", batch ", batch, ", seed ", seed));
    absl::StatusOr<ModelDescription> described = ModelDescription::Parse(text);
    ASSERT_TRUE(described.ok()) << described.status();
    const ModelDescription& d = *described;
    ModelOptions options;
    options.max_batch = batch + 1;
    options.seed = kModelSeed;
    PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Model> model,
                            CreateModel(d, options, backend_.get()));
    ref::Params params;
    for (size_t id = 0; id < model->spec().tensors.size(); ++id) {
      params.push_back(ref::Uniform(model->spec().tensors[id].num_elements(),
                                    seed * 100 + id));
      const std::vector<float> values(params.back().begin(),
                                      params.back().end());
      PS_ASSERT_OK(model->SetWeights(id, values));
    }
    const std::vector<double> x =
        ref::Uniform(batch * d.example_size(), seed + 7);
    const std::vector<float> images(x.begin(), x.end());
    const int classes = d.num_classes();
    std::vector<float> labels;
    for (double v : ref::Uniform(batch, seed + 8, 0, classes - 0.01)) {
      labels.push_back(std::floor(v));
    }
    StepInfo step;
    step.step = 7;
    step.first_example = 2;
    Pass pass;
    pass.batch = batch;
    pass.training = true;
    pass.step = step.step;
    pass.first_example = step.first_example;
    PS_ASSERT_OK_AND_ASSIGN(float loss,
                            model->Forward(images, labels, batch, step));
    PS_ASSERT_OK(model->Backward(nullptr));

    // The reference at this point, and the absolute network.
    const ref::Trace base = ref::NetworkForward(d, kModelSeed, pass, params, x);
    ref::Params abs_params;
    for (const std::vector<double>& p : params) abs_params.push_back(Abs(p));
    const std::vector<double> abs_x = Abs(x);
    const ref::Trace abs = ref::NetworkForward(d, kModelSeed, pass, abs_params,
                                               abs_x, &base.decisions);
    std::vector<ref::Roundings> r;
    ActivationShape in = d.input();
    double forward_total = 0, backward_total = 0, fan_total = 0;
    for (size_t l = 0; l < d.layers().size(); ++l) {
      r.push_back(ref::RoundingsOf(d.layers()[l], in, d.output_shapes()[l],
                                   batch, true));
      forward_total += r.back().forward;
      backward_total += r.back().forward + r.back().grad_x;
      for (double p : r.back().parameters) backward_total += p;
      fan_total += r.back().fan_in;
      in = d.output_shapes()[l];
    }
    CheckDecisionMargins(d, r, base, abs);
    if (HasFatalFailure()) return;

    // The loss gradient G with respect to the logits, and its error dG.
    const std::vector<double>& z = base.inputs.back();
    const std::vector<double>& zhat = abs.inputs.back();
    const double zmax = *std::max_element(zhat.begin(), zhat.end());
    std::vector<double> g(z.size()), abs_g(z.size()), dg(z.size());
    double loss_bound = 0;
    for (int row = 0; row < batch; ++row) {
      const double* zr = z.data() + row * classes;
      const double m = *std::max_element(zr, zr + classes);
      double sum = 0;
      for (int k = 0; k < classes; ++k) sum += std::exp(zr[k] - m);
      const double lse = m + std::log(sum);
      std::vector<double> p(classes);
      double mixed_error = 0;  // sum_j p_j * (forward error of z_j).
      for (int k = 0; k < classes; ++k) {
        p[k] = std::exp(zr[k] - lse);
        mixed_error += p[k] * kUnit * forward_total * zhat[row * classes + k];
      }
      const int target = static_cast<int>(labels[row]);
      for (int k = 0; k < classes; ++k) {
        const int i = row * classes + k;
        g[i] = (p[k] - (k == target)) / batch;
        abs_g[i] = std::abs(g[i]);
        dg[i] =
            kUnit * (p[k] * (2 * std::abs(zr[k] - m) + classes + 8) / batch +
                     2 * abs_g[i]) +
            p[k] / batch * (kUnit * forward_total * zhat[i] + mixed_error);
        loss_bound += abs_g[i] * kUnit * forward_total * zhat[i];
      }
      loss_bound +=
          kUnit * (classes + 8) *
          (2 * std::abs(m) + std::abs(lse) + 1 + std::abs(zr[target])) / batch;
    }
    const double want_loss =
        ref::SoftmaxCrossEntropy(batch, classes, z, labels);
    EXPECT_NEAR(loss, want_loss, 2 * loss_bound);

    // Rounding of the reference's loss, over the step.
    const double fd_rounding =
        kDoubleUnit * (2 * fan_total * zmax + (classes + 8) * (3 * zmax + 1)) /
        kStep;
    for (size_t id = 0; id < params.size(); ++id) {
      SCOPED_TRACE(model->spec().tensors[id].name);
      PS_ASSERT_OK_AND_ASSIGN(absl::Span<const float> gradient,
                              model->Gradient(id));
      ASSERT_EQ(gradient.size(), params[id].size());
      for (size_t e = 0; e < params[id].size(); ++e) {
        // The absolute network's logit sensitivities, exact (it is linear
        // in one parameter).
        ref::Params shifted = abs_params;
        shifted[id][e] += 0.5;
        const std::vector<double> up =
            ref::NetworkForward(d, kModelSeed, pass, shifted, abs_x,
                                &base.decisions)
                .inputs.back();
        shifted[id][e] -= 1.0;
        const std::vector<double> down =
            ref::NetworkForward(d, kModelSeed, pass, shifted, abs_x,
                                &base.decisions)
                .inputs.back();
        double m_abs = 0, m_error = 0, v = 0;
        for (size_t k = 0; k < up.size(); ++k) {
          const double sensitivity = std::abs(up[k] - down[k]);  // / (2 h)
          m_abs += abs_g[k] * sensitivity;
          m_error += dg[k] * sensitivity;
          v = std::max(v, sensitivity);
        }
        // The real network's central difference.
        double loss_at[2];
        for (int side = 0; side < 2; ++side) {
          ref::Params moved = params;
          moved[id][e] += side == 0 ? kStep : -kStep;
          const ref::Trace t =
              ref::NetworkForward(d, kModelSeed, pass, moved, x);
          ASSERT_EQ(t.decisions, base.decisions)
              << "element " << e
              << ": the step crosses a kink; pick "
                 "another seed";
          loss_at[side] =
              ref::SoftmaxCrossEntropy(batch, classes, t.inputs.back(), labels);
        }
        const double numeric = (loss_at[0] - loss_at[1]) / (2 * kStep);
        const double bound = 2 * (kUnit * backward_total * m_abs + m_error) +
                             kStep * kStep / 6 * 8 * v * v * v + fd_rounding;
        ASSERT_LE(std::abs(gradient[e] - numeric), bound)
            << "element " << e << ": got " << gradient[e] << ", want "
            << numeric;
      }
    }
  }

  std::unique_ptr<kernels::Backend> backend_;
};

TEST_F(ModelGradientTest, PoolingNetworkMatchesFiniteDifferences) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    CheckNetwork(
        "input 1x6x6; conv 2 3x3 pad 1; relu; maxpool 2; avgpool 2 stride 1; "
        "flatten; dense 5; relu; dropout 0.5; dense 3",
        3, seed);
  }
}

TEST_F(ModelGradientTest, TwoConvolutionNetworkMatchesFiniteDifferences) {
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    CheckNetwork(
        "input 2x7x7; conv 3 3x3 stride 2; relu; conv 2 2x2 pad 1; "
        "maxpool 2 stride 1; flatten; dropout 0.25; dense 4",
        2, seed);
  }
}

}  // namespace
}  // namespace ps::worker::nn
