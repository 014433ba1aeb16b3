#include "common/model_spec.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ps {

int64_t TensorSpec::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ModelSpec::total_elements() const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors) n += t.num_elements();
  return n;
}

absl::StatusOr<std::vector<int>> ParseLayerSizes(absl::string_view text) {
  constexpr int kMaxLayerSize = 1 << 20;
  std::vector<int> sizes;
  for (absl::string_view part : absl::StrSplit(text, '-')) {
    int size = 0;
    if (!absl::SimpleAtoi(part, &size) || size < 1 || size > kMaxLayerSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer sizes \"", text, "\": \"", part,
                       "\" is not a whole number in [1, ", kMaxLayerSize,
                       "]; expected e.g. 784-256-128-10"));
    }
    sizes.push_back(size);
  }
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer sizes \"", text,
                     "\": need at least an input and an output layer, e.g. "
                     "784-256-128-10"));
  }
  return sizes;
}

ModelSpec MlpModelSpec(absl::Span<const int> layer_sizes) {
  ModelSpec model;
  for (size_t l = 0; l + 1 < layer_sizes.size(); ++l) {
    const int64_t in = layer_sizes[l];
    const int64_t out = layer_sizes[l + 1];
    model.tensors.push_back({absl::StrCat("fc", l, ".weight"),
                             {in, out},
                             in,
                             out,
                             /*is_bias=*/false});
    model.tensors.push_back(
        {absl::StrCat("fc", l, ".bias"), {out}, in, out, /*is_bias=*/true});
  }
  return model;
}

}  // namespace ps
