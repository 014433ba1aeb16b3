#ifndef PS_WORKER_PIPELINE_MICRO_BATCH_GRADIENTS_H_
#define PS_WORKER_PIPELINE_MICRO_BATCH_GRADIENTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ps::worker::pipeline {

// Sums one step's micro-batch gradients of a stage's tensors, micro-batch i
// weighted by weights[i] (its share of the batch's rows), in double, along
// a fixed binary tree over the micro-batch indices: the sum of [lo, hi) is
// the sum of [lo, mid) plus the sum of [mid, hi), mid = lo + (hi - lo) / 2.
// Float addition is commutative though not associative, so the result is
// the same bits whatever order the micro-batches arrive in: GPipe's
// backwards (last first) and 1F1B's (first first) give the step the same
// gradient. A subtree's sum is kept only until its sibling's is ready, so
// micro-batches arriving in order (either way) keep at most
// log2(M) + 1 partial sums per tensor.
//
// Not thread-safe.
class MicroBatchGradients {
 public:
  // Starts a step of weights.size() >= 1 micro-batches over `tensors`
  // tensors (indices [0, tensors)), forgetting the last step's sums.
  void Start(absl::Span<const double> weights, int tensors);

  // Adds micro-batch `micro_batch`'s gradient of tensor `tensor`.
  // InvalidArgument for an index out of range, a micro-batch added twice
  // for the tensor, or a size another micro-batch's gradient of it lacks.
  absl::Status Add(int micro_batch, int tensor, absl::Span<const float> g);

  // The weighted sum of tensor `tensor`'s gradients, in float, into `out`;
  // FailedPrecondition unless every micro-batch was added for it.
  absl::Status Sum(int tensor, std::vector<float>& out) const;

  // Bytes of the double buffers it holds (partial sums and spares, kept
  // for the next step), for a worker's memory budget.
  int64_t held_bytes() const;

 private:
  struct Node {
    int parent = -1;
    int left = -1;  // Children; -1 for a leaf.
    int right = -1;
  };
  struct Tensor {
    std::vector<std::vector<double>> sums;  // By node; empty unless ready.
    std::vector<bool> ready;
    std::vector<bool> added;                 // By micro-batch.
    int count = 0;                           // Micro-batches added.
    std::vector<std::vector<double>> spare;  // Buffers to reuse.
    size_t size = 0;
  };

  int Build(int lo, int hi, int parent);

  std::vector<double> weights_;
  std::vector<Node> nodes_;  // nodes_[0] is the root.
  std::vector<int> leaf_;    // By micro-batch.
  std::vector<Tensor> tensors_;
};

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_MICRO_BATCH_GRADIENTS_H_
