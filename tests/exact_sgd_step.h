#ifndef PS_TESTS_EXACT_SGD_STEP_H_
#define PS_TESTS_EXACT_SGD_STEP_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "worker/dataset.h"

namespace ps::testing {

// How the servers combine the ranks' pushes of one synchronous step, where
// rank r pushes the mean gradient g_r of its n_r examples. The first is what
// our servers must do; the others are mistakes a test of them must catch.
enum class Aggregation {
  kWeightedMean,    // sum_r n_r g_r / sum_r n_r
  kDropLastRank,    // the last rank's push lost
  kFirstRankTwice,  // rank 0's push counted twice
  kSumOfRankMeans,  // sum_r g_r: the weights n_r / N forgotten
};

// Per tensor, per element.
struct ExactStep {
  // The weights after the step, in exact arithmetic (to within double
  // rounding).
  std::vector<std::vector<double>> weights;
  // How far from them any float32 execution of the step can land.
  std::vector<std::vector<double>> bound;
};

// One synchronous step of plain SGD (w -= lr g, as update/optimizer.h with no
// momentum or weight decay) on the MLP of worker/mlp.h: x W + b per layer,
// ReLU between layers, softmax cross-entropy averaged over the step's
// examples. `weights` holds each tensor of MlpModelSpec(layer_sizes) in its
// order and layout; rank r trained on `ranks[r]` (labels are class indices; a
// rank may have no examples).
//
// The bound is first-order and holds however the float32 sums are ordered,
// so on any BLAS kernel and whether the examples are split across ranks or
// not: a k-term float32 sum of products is off by at most gamma(k) = k u /
// (1 - k u) times the sum of its terms' magnitudes (u = 2^-24), plus what the
// errors already in its operands contribute, and a softmax of logits off by
// at most e is off by at most p (exp(2e) - 1). One event is not smooth: where
// a pre-activation lies within its error bound of zero, float32 may take the
// other side of the ReLU, and pass back through that unit the whole gradient
// or none of it; the bound counts that in full for such units. Those units
// are why the bound is for one step from exact weights: carried over a
// second step, it marks nearly every unit and bounds nothing.
//
// Slow by design: the obvious loops.
ExactStep ExactSgdStep(absl::Span<const int> layer_sizes,
                       const std::vector<std::vector<float>>& weights,
                       float learning_rate,
                       absl::Span<const worker::Batch> ranks,
                       Aggregation aggregation);

// The pieces ExactSgdStep is made of, for the reference steps of other
// networks (tests/exact_network_step.h).

// float32's unit roundoff: a correctly rounded operation is off by at most
// this much relative to its exact result.
inline constexpr double kUnitRoundoff = 0x1p-24;

// Higham's gamma(k): the relative error bound of a k-term float32 sum of
// products, in any order, with or without fused multiply-adds.
double Gamma(int64_t k);

// What each example's gradient is multiplied by in the step under
// `aggregation`: the weight the servers give rank `rank`'s mean, divided by
// its example count.
double AggregationCoefficient(Aggregation aggregation,
                              absl::Span<const worker::Batch> ranks,
                              size_t rank);

// d(softmax cross-entropy)/d(logits) of labels.size() examples, times
// `coefficient`, and how far float32 can land from it given logits off by
// at most `logit_bound` (both [examples, classes]).
void SoftmaxDelta(int classes, absl::Span<const double> logits,
                  absl::Span<const double> logit_bound,
                  absl::Span<const float> labels, double coefficient,
                  std::vector<double>& delta, std::vector<double>& delta_bound);

// Turns the step's exact gradient (with its float32 bound) into the exact
// weights after w -= lr g, from exact `weights`, adding the update's own
// rounding to the bound.
ExactStep SgdUpdate(const std::vector<std::vector<float>>& weights,
                    float learning_rate, ExactStep gradient);

}  // namespace ps::testing

#endif  // PS_TESTS_EXACT_SGD_STEP_H_
