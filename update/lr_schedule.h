#ifndef PS_UPDATE_LR_SCHEDULE_H_
#define PS_UPDATE_LR_SCHEDULE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps::update {

enum class LrScheduleKind { kConstant, kCosine };

// Parses "constant" or "cosine".
absl::StatusOr<LrScheduleKind> ParseLrSchedule(absl::string_view name);
absl::string_view LrScheduleName(LrScheduleKind kind);

// The learning rate of each update a shard applies, by update index (the
// shard's version before the update):
//   constant: base.
//   cosine:   min + (base - min) * (1 + cos(pi * u / H)) / 2 for u < H, and
//             min from the horizon H on (clamped, so a job that runs longer
//             than planned keeps training at the floor).
// The horizon (planned updates) is only known once workers register, so it
// is an argument; 0 means unknown, and gives base.
//
// Immutable; safe to share between threads.
class LearningRateSchedule {
 public:
  // InvalidArgument naming the flag unless base is finite and > 0 and
  // min_rate is finite and in [0, base].
  static absl::StatusOr<LearningRateSchedule> Create(LrScheduleKind kind,
                                                     float base,
                                                     float min_rate);

  float At(uint64_t update, uint64_t horizon) const;

  LrScheduleKind kind() const { return kind_; }

 private:
  LearningRateSchedule(LrScheduleKind kind, float base, float min_rate)
      : kind_(kind), base_(base), min_(min_rate) {}

  LrScheduleKind kind_;
  float base_;
  float min_;
};

}  // namespace ps::update

#endif  // PS_UPDATE_LR_SCHEDULE_H_
