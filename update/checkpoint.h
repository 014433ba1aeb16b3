#ifndef PS_UPDATE_CHECKPOINT_H_
#define PS_UPDATE_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "update/coordinator_state.h"
#include "update/shard_store.h"

namespace ps::update {

// Which shard of which job's layout a checkpoint belongs to, as the
// server's flags say; a shard refuses to restore one whose identity differs
// from its own.
struct CheckpointIdentity {
  int num_servers = 0;
  int server_index = 0;
  std::string mode;  // "sync", "ssp", "async".
  int num_workers = 0;
};

// Everything a shard needs to resume: weights and optimizer state of every
// slice, and the coordinator's state (version, ranks, example counts,
// staleness histogram), taken at one consistent point.
struct ShardCheckpoint {
  CheckpointIdentity identity;
  // The declaration the shard was built from; a restored shard needs no
  // other and refuses workers that declare another.
  ModelSpec model;
  // Of Partition::Create(model, num_servers); checked when decoding.
  uint64_t partition_fingerprint = 0;
  uint64_t version = 0;
  // Agreed at registration (0: not yet known); the learning-rate schedule
  // spans it.
  uint64_t planned_steps = 0;
  std::vector<RankRecord> ranks;  // num_workers of them.
  ExampleCounts examples;
  StalenessHistogramState staleness;
  std::vector<SliceSnapshot> slices;  // In ShardStore slice order.
};

// A checkpoint as the records of a record file (common/record_file.h, kind
// "checkpoint"): a header (format version, identity, fingerprint, version,
// planned steps), the declaration (a serialized ps.proto.ModelDeclaration),
// the ranks, the example counts, the staleness histogram, then one
// record per slice (update count, weights, optimizer state vectors, floats
// through common/tensor_codec.h).
std::vector<std::string> EncodeCheckpoint(const ShardCheckpoint& checkpoint);
// DataLoss naming the record that is malformed, or when the declaration
// does not give the recorded fingerprint.
absl::StatusOr<ShardCheckpoint> DecodeCheckpoint(
    const std::vector<std::string>& records);

// FailedPrecondition naming what differs when `found` is not `expected`.
absl::Status CheckIdentity(const CheckpointIdentity& expected,
                           const CheckpointIdentity& found);

// "shard-<index>-<version>.ckpt".
std::string CheckpointFileName(int server_index, uint64_t version);
// The version in `file_name` if it is shard `server_index`'s checkpoint
// file name.
std::optional<uint64_t> CheckpointVersion(absl::string_view file_name,
                                          int server_index);

// Reads and decodes one checkpoint file: NotFound, or DataLoss naming what
// is malformed.
absl::StatusOr<ShardCheckpoint> ReadCheckpoint(const std::string& path);

// Writes `checkpoint` atomically (temporary file, fsync, rename) to
// `dir`/shard-<index>-<version>.ckpt, creating `dir` if needed, then deletes
// this shard's older checkpoints so that the newest `keep` remain (never the
// one just written). Returns the path written.
absl::StatusOr<std::string> WriteCheckpoint(const std::string& dir,
                                            const ShardCheckpoint& checkpoint,
                                            int keep = 2);

// Paths of shard `server_index`'s checkpoints in `dir`, newest version
// first. A missing directory holds none.
absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& dir,
                                                         int server_index);

struct LoadedCheckpoint {
  std::string path;
  ShardCheckpoint checkpoint;
  // Newer files that could not be read, each with the reason; they were
  // renamed to <path>.corrupt so that they are not tried again.
  std::vector<std::string> skipped;
};

// The newest of `expected.server_index`'s checkpoints in `dir` that reads
// cleanly. A truncated or corrupted file (or one with malformed contents) is
// skipped for the one before it. Returns nullopt if there are none at all;
// DataLoss naming every file and its reason if none is readable; and
// FailedPrecondition, without trying older files, if the newest readable
// one belongs to another server count, shard, mode or worker count.
absl::StatusOr<std::optional<LoadedCheckpoint>> LoadNewestCheckpoint(
    const std::string& dir, const CheckpointIdentity& expected);

}  // namespace ps::update

#endif  // PS_UPDATE_CHECKPOINT_H_
