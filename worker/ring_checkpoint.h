#ifndef PS_WORKER_RING_CHECKPOINT_H_
#define PS_WORKER_RING_CHECKPOINT_H_

#include <optional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "allreduce/gloo_group.h"
#include "client/parameter_client.h"
#include "update/checkpoint.h"
#include "worker/local_exchange.h"

namespace ps::worker {

// The all-reduce mode's checkpoints: update/checkpoint.h's format, as the
// one shard of a one-server job holding the whole model (identity: 1
// server, index 0, mode "allreduce", the ring's workers), with every rank's
// record at the checkpoint's step. Rank 0 writes them; every rank resumes
// from the one rank 0 reads, which it sends over the ring, so that the
// workers need no shared disk.

update::CheckpointIdentity RingIdentity(int num_workers);

// The checkpoint of `local` at its current version: every rank has done
// that many steps and stands at `cursors[rank]`.
update::ShardCheckpoint TakeRingCheckpoint(
    const LocalExchange& local, absl::Span<const DataCursor> cursors);

// Puts `checkpoint` into `local` (weights, optimizer state, version) and
// returns where rank `rank` resumes. FailedPrecondition for another model
// or worker count; nothing changes on error.
absl::StatusOr<Registration> RestoreRingCheckpoint(
    const update::ShardCheckpoint& checkpoint, int rank, LocalExchange& local);

// Rank 0's `checkpoint` (nullopt: none) on every rank of `group`, sent as
// its encoded records; what the other ranks pass is ignored. A collective:
// every rank calls it. DataLoss if the bytes do not decode.
absl::StatusOr<std::optional<update::ShardCheckpoint>> ShareFromRank0(
    allreduce::GlooGroup& group,
    const std::optional<update::ShardCheckpoint>& checkpoint);

}  // namespace ps::worker

#endif  // PS_WORKER_RING_CHECKPOINT_H_
