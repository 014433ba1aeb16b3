#ifndef PS_UPDATE_UPDATE_LOG_RECORD_H_
#define PS_UPDATE_UPDATE_LOG_RECORD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "update/update_log.h"

namespace ps::update {

// What one record of a shard's update log (update/update_log.h) says took
// effect, in the order it did: exactly what the update code consumed, so
// that replaying the records after a checkpoint through the same code gives
// the same bits, and the exactly-once state (each rank's data progress)
// with them.

// A push the shard applied at once (ssp, async), followed by its
// LoggedApply. (Format 2 logged sync pushes too, one by one; a sync shard
// logs a step's mean instead: LoggedStepMean.)
struct LoggedPush {
  int rank = 0;
  uint64_t incarnation = 0;
  uint64_t step = 0;
  uint64_t base_version = 0;
  uint32_t num_examples = 0;
  uint64_t epoch = 0;
  uint64_t examples_done = 0;
  std::optional<float> learning_rate;  // The worker's, if it set one.
  // One per slice of the shard, in ShardStore order; none when the push
  // carries no examples (it changes no weight).
  std::vector<std::vector<float>> gradients;
};

// The LoggedPush just before it was applied at once as the update that took
// the shard from `version`, at `learning_rate` (unset: the optimizer's).
struct LoggedApply {
  uint64_t version = 0;
  std::optional<float> learning_rate;
};

// One rank's part in a sync step (LoggedStepMean): what its push changed
// besides the weights (its rank record, the staleness).
struct LoggedStepPart {
  int rank = 0;
  uint64_t base_version = 0;
  uint32_t num_examples = 0;
  uint64_t epoch = 0;
  uint64_t examples_done = 0;
};

// Sync step `step` applied as one update at `learning_rate` (format 3):
// the ranks' parts that had a push, in rank order, and the mean gradient the
// optimizer consumed, one vector per slice in ShardStore order (none when no
// part carries examples: the step changes no weight). Replay feeds the same
// floats to the same optimizer, so it gives the same bits.
struct LoggedStepMean {
  uint64_t step = 0;
  std::optional<float> learning_rate;
  std::vector<LoggedStepPart> parts;
  std::vector<std::vector<float>> mean;
};

// A process registered as `rank`.
struct LoggedRegister {
  int rank = 0;
  uint64_t incarnation = 0;
  uint64_t planned_steps = 0;
  uint32_t max_examples = 0;
};

// `rank` said it is done.
struct LoggedDone {
  int rank = 0;
};

using LogRecord = std::variant<LoggedPush, LoggedApply, LoggedStepMean,
                               LoggedRegister, LoggedDone>;

// A record's payload: a u32 type, then its fields, little-endian; a push's
// gradients as a u32 slice count and per slice a u64 element count and the
// float32 values.
std::string EncodeLogRecord(const LogRecord& record);
// A push's record as a log entry (update/update_log.h), its checksum
// computed, whose gradients are written where they lie (`push.gradients`
// is ignored): `bytes(slice, emit)` emits the float32 little-endian bytes
// of slice `slice`'s `slice_sizes[slice]` elements, in order, as views that
// `keep` keeps alive. Not called when the push has no examples.
LogEntry MakePushEntry(
    const LoggedPush& push, absl::Span<const uint64_t> slice_sizes,
    absl::FunctionRef<void(int slice,
                           absl::FunctionRef<void(absl::string_view)> emit)>
        bytes,
    std::shared_ptr<const void> keep);
// A sync step's record as a log entry, its checksum computed, whose mean is
// written where it lies: `step` must outlive the entry.
LogEntry MakeStepMeanEntry(const LoggedStepMean& step);
// DataLoss naming what is malformed.
absl::StatusOr<LogRecord> DecodeLogRecord(absl::string_view payload);

}  // namespace ps::update

#endif  // PS_UPDATE_UPDATE_LOG_RECORD_H_
