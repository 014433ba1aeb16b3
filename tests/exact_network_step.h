#ifndef PS_TESTS_EXACT_NETWORK_STEP_H_
#define PS_TESTS_EXACT_NETWORK_STEP_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "tests/exact_sgd_step.h"
#include "worker/dataset.h"
#include "worker/nn/model_description.h"

namespace ps::testing {

// Which step a network takes, beyond its weights and data: what selects its
// dropout masks (worker/nn/model.h's StepInfo).
struct NetworkStep {
  uint64_t seed = 1;   // The model's seed (the worker's --seed).
  uint64_t clock = 0;  // The step's clock: 0 for a run's first step.
  // The workers' --batch_size: rank r's examples follow r * batch_size
  // others in the step's global batch.
  int batch_size = 0;
};

// ExactSgdStep (tests/exact_sgd_step.h) for any network of worker/nn
// (convolution, pooling, ReLU, flatten, dense, dropout; softmax
// cross-entropy): the weights after one synchronous step of plain SGD in
// exact arithmetic, with `weights` indexed like description.Spec(), and how
// far from them any float32 execution of the step can land.
//
// The bound is ExactSgdStep's, carried through each layer: every sum of
// products is off by at most gamma(k) times the sum of its terms' magnitudes
// (k from worker/nn/reference_net.h's RoundingsOf, which holds for any
// backend, here with the global batch's count for sums over examples), plus
// its operands' errors carried through the layer's absolute values. Two
// events are not smooth and count in full where float32 may take the other
// side: a ReLU whose input lies within its bound of zero, and a max-pooling
// window whose other elements lie within the bounds of the chosen one (the
// output's whole gradient may go to any of them). Valid for one step from
// exact weights, like ExactSgdStep's.
//
// Slow by design: the reference network's obvious loops.
ExactStep ExactNetworkSgdStep(const worker::nn::ModelDescription& description,
                              const NetworkStep& step,
                              const std::vector<std::vector<float>>& weights,
                              float learning_rate,
                              absl::Span<const worker::Batch> ranks,
                              Aggregation aggregation);

}  // namespace ps::testing

#endif  // PS_TESTS_EXACT_NETWORK_STEP_H_
