#include "common/flag_range.h"

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status CheckFlagRange(absl::string_view flag, int64_t value, int64_t low,
                            int64_t high) {
  if (value >= low && value <= high) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--", flag, " must be in [", low, ", ", high, "], got ", value));
}

}  // namespace ps
