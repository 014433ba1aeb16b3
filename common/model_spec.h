#ifndef PS_COMMON_MODEL_SPEC_H_
#define PS_COMMON_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

// One trainable tensor of a model: a name for logs and a row-major shape.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  // Inputs and outputs of the layer the tensor belongs to, for initializers.
  int64_t fan_in = 0;
  int64_t fan_out = 0;
  // Biases start at zero, weights from a seeded uniform distribution.
  bool is_bias = false;

  int64_t num_elements() const;
};

// The ordered list of a model's tensors. A tensor's id is its index here;
// servers and workers derive the same list from the same flags.
struct ModelSpec {
  std::vector<TensorSpec> tensors;

  int64_t total_elements() const;
};

// Parses "784-256-128-10" into {784, 256, 128, 10}: at least an input and an
// output layer, each size in [1, 1 << 20].
absl::StatusOr<std::vector<int>> ParseLayerSizes(absl::string_view text);

// A fully connected network: for each layer l, a weight "fc<l>.weight" of
// shape [sizes[l], sizes[l + 1]] (input-major, so y = x * W) and a bias
// "fc<l>.bias" of shape [sizes[l + 1]].
ModelSpec MlpModelSpec(absl::Span<const int> layer_sizes);

}  // namespace ps

#endif  // PS_COMMON_MODEL_SPEC_H_
