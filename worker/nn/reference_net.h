#ifndef PS_WORKER_NN_REFERENCE_NET_H_
#define PS_WORKER_NN_REFERENCE_NET_H_

// Double-precision networks for tests: each layer computed by the obvious
// loops from its definition (kernels/backend.h, model_description.h), so
// that finite differences of them are something too simple to be wrong.
// Slow by design; shapes must match (checked with assert).

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "worker/nn/layer.h"
#include "worker/nn/model_description.h"

namespace ps::worker::nn::testing {

// Parameters of a layer (weight, then bias) or of a network (by tensor id).
using Params = std::vector<std::vector<double>>;

// What a layer's nonlinearity decided: for a ReLU, 1 where its input is
// positive, else 0; for max pooling, the index in x of the element each
// output copies (the first maximum). Empty for other layers.
using Decisions = std::vector<int64_t>;

// The output of `config` on [pass.batch, in] inputs `x`, whose output shape
// is `out`. A dropout layer uses the mask of `dropout_seed` (DropoutSeed
// of its network) and `pass`, scaling by the float kernels use. Records
// the layer's decisions into `record` if given; with `replay`, takes those
// decisions instead of its own (the network linearized at another point).
std::vector<double> LayerForward(
    const LayerConfig& config, const ActivationShape& in,
    const ActivationShape& out, const Pass& pass, uint64_t dropout_seed,
    absl::Span<const double> x, const Params& params,
    Decisions* record = nullptr, const Decisions* replay = nullptr);

// What a layer gives back for `dy`, d(loss)/d(its output) on
// [pass.batch, out]: `input` is d(loss)/d(x) and `params` the gradients of
// its parameters (weight, then bias; empty for layers without), summed
// over the batch. `decisions` are those LayerForward recorded at `x`. Both
// are linear in `dy`; the input gradient does not read `x`, and the weight
// gradient does not read `params`.
struct LayerGradients {
  std::vector<double> input;
  Params params;
};
LayerGradients LayerBackward(const LayerConfig& config,
                             const ActivationShape& in,
                             const ActivationShape& out, const Pass& pass,
                             uint64_t dropout_seed, absl::Span<const double> x,
                             const Params& params, const Decisions& decisions,
                             absl::Span<const double> dy);

// A network's forward pass: inputs[l] is what layer l gets, inputs.back()
// the logits; decisions[l] those of layer l.
struct Trace {
  std::vector<std::vector<double>> inputs;
  std::vector<Decisions> decisions;
};

// The forward pass of a Model built from `description` with
// ModelOptions::seed `seed`, `params` indexed like description.Spec();
// with `replay`, every layer takes those decisions.
Trace NetworkForward(const ModelDescription& description, uint64_t seed,
                     const Pass& pass, const Params& params,
                     absl::Span<const double> images,
                     const std::vector<Decisions>* replay = nullptr);

// The mean over rows of softmax cross-entropy of [batch, classes] logits.
double SoftmaxCrossEntropy(int batch, int classes,
                           absl::Span<const double> logits,
                           absl::Span<const float> labels);

// The loss a Model built from `description` with ModelOptions::seed `seed`
// computes, with `params` indexed like description.Spec().
double NetworkLoss(const ModelDescription& description, uint64_t seed,
                   const Pass& pass, const Params& params,
                   absl::Span<const double> images,
                   absl::Span<const float> labels);

// Bounds on the float roundings (units of 2^-24 of the sum of absolute
// terms) of a layer's results on any backend: a k-term sum may be off by
// k + 3 of them, whatever the order or FMA use.
struct Roundings {
  double forward = 0;
  double grad_x = 0;
  std::vector<double> parameters;  // Weight, bias.
  int64_t fan_in = 1;              // Terms of one output, in the reference.
};
Roundings RoundingsOf(const LayerConfig& c, const ActivationShape& in,
                      const ActivationShape& out, int batch, bool training);

// Deterministic values uniform in [lo, hi] (kernels' RandomUniform, widened).
std::vector<double> Uniform(size_t n, uint64_t seed, double lo = -1.0,
                            double hi = 1.0);

}  // namespace ps::worker::nn::testing

#endif  // PS_WORKER_NN_REFERENCE_NET_H_
