#ifndef PS_COMMON_FLAG_RANGE_H_
#define PS_COMMON_FLAG_RANGE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ps {

// OK if low <= value <= high; otherwise InvalidArgument
// "--FLAG must be in [LOW, HIGH], got VALUE", the one wording every binary's
// flag checks use for an integer out of its range.
absl::Status CheckFlagRange(absl::string_view flag, int64_t value, int64_t low,
                            int64_t high);

}  // namespace ps

#endif  // PS_COMMON_FLAG_RANGE_H_
