#ifndef PS_UPDATE_CHECKPOINT_MODEL_H_
#define PS_UPDATE_CHECKPOINT_MODEL_H_

// The trained model in a job's checkpoints, for programs that use the
// weights rather than resume the job (paramserver.load_checkpoint).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_spec.h"

namespace ps::update {

struct CheckpointedModel {
  // The updates every shard had applied.
  uint64_t version = 0;
  // The declaration the shards were built from.
  ModelSpec model;
  // One buffer per tensor, in declaration order, put together from every
  // shard's slices.
  std::vector<std::vector<float>> weights;
};

// Reads the checkpoints in `dir` of every shard of the job at the newest
// version all of them wrote (a shard keeps its newest few; a job that ended
// wrote the same final version on every shard). NotFound without a
// checkpoint of shard 0; FailedPrecondition naming each shard's versions
// when none is common to all; DataLoss for an unreadable file or shards
// that disagree on the job.
absl::StatusOr<CheckpointedModel> ReadCheckpointedModel(const std::string& dir);

}  // namespace ps::update

#endif  // PS_UPDATE_CHECKPOINT_MODEL_H_
