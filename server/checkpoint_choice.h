#ifndef PS_SERVER_CHECKPOINT_CHOICE_H_
#define PS_SERVER_CHECKPOINT_CHOICE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "update/checkpoint.h"

namespace ps::server {

// How a shard starts when it keeps checkpoints (--restore, --extend).
enum class RestoreMode {
  // Fresh: the directory must hold no checkpoint of the shard, so that a
  // later restore cannot mix two runs.
  kNone,
  // From the newest readable checkpoint, or fresh if there is none; a
  // finished run's checkpoint is refused.
  kRestore,
  // From the newest readable checkpoint, which must exist; a finished run's
  // is taken, its workers no longer done.
  kExtend,
};

// The checkpoint in `dir` that shard `shard.server_index` starts from, as
// `mode` says, or nullopt when it starts fresh. First checks that `dir` can
// be created and written (checkpoints are written in the background and on
// SIGTERM: better to find out now). Logs the choice and every newer file
// skipped as unreadable.
//
// InvalidArgument naming --checkpoint_dir when it cannot be written or, with
// kNone, holds checkpoints of the shard; FailedPrecondition for a
// checkpoint of another run (LoadNewestCheckpoint), of a finished run under
// kRestore, or none under kExtend; DataLoss when none is readable.
absl::StatusOr<std::optional<update::LoadedCheckpoint>> ChooseCheckpoint(
    const std::string& dir, const update::CheckpointIdentity& shard,
    RestoreMode mode);

}  // namespace ps::server

#endif  // PS_SERVER_CHECKPOINT_CHOICE_H_
