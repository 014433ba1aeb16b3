#include "worker/pipeline/micro_batch_gradients.h"

#include <utility>
#include <vector>

#include "absl/strings/str_format.h"

namespace ps::worker::pipeline {

int MicroBatchGradients::Build(int lo, int hi, int parent) {
  const int id = static_cast<int>(nodes_.size());
  nodes_.push_back({parent, -1, -1});
  if (hi - lo == 1) {
    leaf_[lo] = id;
    return id;
  }
  const int mid = lo + (hi - lo) / 2;
  const int left = Build(lo, mid, id);
  const int right = Build(mid, hi, id);
  nodes_[id].left = left;
  nodes_[id].right = right;
  return id;
}

void MicroBatchGradients::Start(absl::Span<const double> weights, int tensors) {
  weights_.assign(weights.begin(), weights.end());
  nodes_.clear();
  leaf_.assign(weights.size(), -1);
  if (!weights.empty()) Build(0, static_cast<int>(weights.size()), -1);
  tensors_.resize(tensors);
  for (Tensor& t : tensors_) {
    for (std::vector<double>& sum : t.sums) {
      if (sum.capacity() > 0) t.spare.push_back(std::move(sum));
    }
    t.sums.assign(nodes_.size(), {});
    t.ready.assign(nodes_.size(), false);
    t.added.assign(weights.size(), false);
    t.count = 0;
  }
}

absl::Status MicroBatchGradients::Add(int micro_batch, int tensor,
                                      absl::Span<const float> g) {
  if (micro_batch < 0 || micro_batch >= static_cast<int>(leaf_.size()) ||
      tensor < 0 || tensor >= static_cast<int>(tensors_.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MicroBatchGradients: micro-batch %d of %d, tensor %d of %d",
        micro_batch, leaf_.size(), tensor, tensors_.size()));
  }
  Tensor& t = tensors_[tensor];
  int node = leaf_[micro_batch];
  if (t.added[micro_batch]) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MicroBatchGradients: micro-batch %d of tensor %d added twice",
        micro_batch, tensor));
  }
  if (t.count == 0) t.size = g.size();
  if (g.size() != t.size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MicroBatchGradients: micro-batch %d's gradient of tensor %d has %d "
        "elements, another's %d",
        micro_batch, tensor, g.size(), t.size));
  }
  std::vector<double> leaf;
  if (!t.spare.empty()) {
    leaf = std::move(t.spare.back());
    t.spare.pop_back();
  }
  leaf.resize(g.size());
  const double w = weights_[micro_batch];
  for (size_t e = 0; e < g.size(); ++e) leaf[e] = w * g[e];
  t.added[micro_batch] = true;
  ++t.count;
  t.sums[node] = std::move(leaf);
  t.ready[node] = true;
  // Climb while the sibling's sum is ready: the parent is left + right.
  for (int parent = nodes_[node].parent; parent >= 0;
       node = parent, parent = nodes_[node].parent) {
    const Node& p = nodes_[parent];
    if (!t.ready[p.left] || !t.ready[p.right]) break;
    std::vector<double>& left = t.sums[p.left];
    const std::vector<double>& right = t.sums[p.right];
    for (size_t e = 0; e < left.size(); ++e) left[e] += right[e];
    t.sums[parent] = std::move(left);
    t.spare.push_back(std::move(t.sums[p.right]));
    t.sums[p.left].clear();
    t.sums[p.right].clear();
    t.ready[p.left] = t.ready[p.right] = false;
    t.ready[parent] = true;
  }
  return absl::OkStatus();
}

int64_t MicroBatchGradients::held_bytes() const {
  size_t doubles = 0;
  for (const Tensor& t : tensors_) {
    for (const std::vector<double>& sum : t.sums) doubles += sum.capacity();
    for (const std::vector<double>& sum : t.spare) doubles += sum.capacity();
  }
  return static_cast<int64_t>(doubles * sizeof(double));
}

absl::Status MicroBatchGradients::Sum(int tensor,
                                      std::vector<float>& out) const {
  if (tensor < 0 || tensor >= static_cast<int>(tensors_.size()) ||
      nodes_.empty() || !tensors_[tensor].ready[0]) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "MicroBatchGradients: tensor %d does not have every micro-batch's "
        "gradient",
        tensor));
  }
  const std::vector<double>& root = tensors_[tensor].sums[0];
  out.assign(root.begin(), root.end());
  return absl::OkStatus();
}

}  // namespace ps::worker::pipeline
