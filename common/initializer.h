#ifndef PS_COMMON_INITIALIZER_H_
#define PS_COMMON_INITIALIZER_H_

#include <cstdint>

#include "absl/types/span.h"
#include "common/model_spec.h"

namespace ps {

// Writes the initial values of elements [offset, offset + out.size()) of
// tensor `tensor_id` of `model`, as its InitializerSpec says. Each element is
// a function of (model.seed, tensor id, element index) alone, so a model is
// initialized to the same values whatever the number of servers it is split
// across. kFromRank0 tensors are written as zeros until rank 0's values
// arrive.
void InitializeSlice(const ModelSpec& model, uint32_t tensor_id,
                     uint64_t offset, absl::Span<float> out);

}  // namespace ps

#endif  // PS_COMMON_INITIALIZER_H_
