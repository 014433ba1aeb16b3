#include "update/lr_schedule.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ps::update {

absl::StatusOr<LrScheduleKind> ParseLrSchedule(absl::string_view name) {
  if (name == "constant") return LrScheduleKind::kConstant;
  if (name == "cosine") return LrScheduleKind::kCosine;
  return absl::InvalidArgumentError(absl::StrCat(
      "--lr_schedule must be \"constant\" or \"cosine\", got \"", name, "\""));
}

absl::string_view LrScheduleName(LrScheduleKind kind) {
  return kind == LrScheduleKind::kConstant ? "constant" : "cosine";
}

absl::StatusOr<LearningRateSchedule> LearningRateSchedule::Create(
    LrScheduleKind kind, float base, float min_rate) {
  if (!std::isfinite(base) || base <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--learning_rate must be finite and > 0, got ", base));
  }
  if (!std::isfinite(min_rate) || min_rate < 0 || min_rate > base) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--min_learning_rate must be in [0, --learning_rate = ", base,
        "], got ", min_rate));
  }
  return LearningRateSchedule(kind, base, min_rate);
}

float LearningRateSchedule::At(uint64_t update, uint64_t horizon) const {
  if (kind_ == LrScheduleKind::kConstant || horizon == 0) return base_;
  if (update >= horizon) return min_;
  // In double: u / H needs more than float's 24 bits for long runs.
  const double progress =
      static_cast<double>(update) / static_cast<double>(horizon);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return static_cast<float>(min_ + (double{base_} - min_) * cosine);
}

}  // namespace ps::update
