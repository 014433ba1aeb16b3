#ifndef PS_SERVER_OPTIMIZER_STATE_H_
#define PS_SERVER_OPTIMIZER_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/parameter_server.pb.h"
#include "update/shard_store.h"

namespace ps::server {

// The wire kind of the shard's optimizer (ps.proto OptimizerDeclaration).
proto::OptimizerDeclaration::Kind OptimizerKindOf(
    const update::ShardStore& store);

// The header that describes `slices` (one SnapshotOptimizerState per slice
// of `store`, in order) at `version`.
proto::OptimizerStateHeader DescribeOptimizerState(
    const update::ShardStore& store, uint64_t version,
    const std::vector<update::SliceSnapshot>& slices);

// Assembles a written optimizer state (ps.proto OptimizerStates.Write)
// from its header and chunks, checking each against the shard before
// anything is applied: Start checks the header, Add each chunk, Finish that
// every element came. Every refusal is a status naming what differs:
// InvalidArgument for a malformed write (another format, a chunk outside
// its vector or out of order, an element missing), FailedPrecondition for
// a state that does not fit this shard (another optimizer kind, a tensor
// it does not hold or of another shape, other slices or state vectors).
// What it returns is then applied with ShardStore::RestoreOptimizerState.
//
// Not thread-safe: one per write, used by the thread that serves it.
class OptimizerStateAssembly {
 public:
  // Checks `header` against `store`'s slices and optimizer.
  static absl::StatusOr<OptimizerStateAssembly> Start(
      const update::ShardStore& store,
      const proto::OptimizerStateHeader& header);

  // Takes a chunk: the next elements of its slice's vector, in order.
  absl::Status Add(const proto::OptimizerStateChunk& chunk);

  // The slices' state (weights empty), once every element has come.
  absl::StatusOr<std::vector<update::SliceSnapshot>> Finish() &&;

 private:
  OptimizerStateAssembly(std::vector<update::SliceSnapshot> slices,
                         std::vector<std::string> names);

  std::vector<update::SliceSnapshot> slices_;
  // Elements received of each slice's vectors.
  std::vector<std::vector<uint64_t>> filled_;
  // Which tensor each slice is of, for messages.
  std::vector<std::string> names_;
};

}  // namespace ps::server

#endif  // PS_SERVER_OPTIMIZER_STATE_H_
