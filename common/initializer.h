#ifndef PS_COMMON_INITIALIZER_H_
#define PS_COMMON_INITIALIZER_H_

#include <cstdint>

#include "absl/types/span.h"
#include "common/model_spec.h"

namespace ps {

// Writes the initial values of elements [offset, offset + out.size()) of
// tensor `tensor_id` of `model`. Each element is a function of (seed, tensor
// id, element index) alone, so a model is initialized to the same weights
// whatever the number of servers it is split across. Weights are drawn from
// the Glorot uniform distribution, biases start at zero.
void InitializeSlice(const ModelSpec& model, uint32_t tensor_id,
                     uint64_t offset, uint64_t seed, absl::Span<float> out);

}  // namespace ps

#endif  // PS_COMMON_INITIALIZER_H_
