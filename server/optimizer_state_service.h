#ifndef PS_SERVER_OPTIMIZER_STATE_SERVICE_H_
#define PS_SERVER_OPTIMIZER_STATE_SERVICE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/status.h"
#include "proto/parameter_server.pb.h"
#include "server/blocking_stream_service.h"
#include "server/byte_stream.h"
#include "server/shard_host.h"

namespace ps::server {

// The wire face of the shard's optimizer state (ps.proto OptimizerStates):
// Read streams every slice's optimizer state; Write takes a whole state for
// the shard, checks it (server/optimizer_state.h), and applies it between
// two updates (UpdateCoordinator::WhileUpdatesPaused), all of it or none.
//
// Policy (the proto states it for clients): any registered rank reads;
// rank 0 alone writes, at the version it names (Aborted if the shard's
// moved: the write came during another update); a write is answered once a
// checkpoint holding it is on disk, when the shard keeps checkpoints, so
// that a restart (whose update log replays from that checkpoint on) keeps
// it.
//
// Served as methods of a BlockingStreamService (AddTo), so that both
// transports serve them with the shard's authentication. Thread-safe;
// holds nothing but its pointer to the host, which must outlive it.
class OptimizerStateService {
 public:
  // `default_chunk_elements` per chunk of a read that asks for 0, at most
  // `max_chunk_elements` whatever it asks.
  OptimizerStateService(ShardHost* host, uint64_t default_chunk_elements,
                        uint64_t max_chunk_elements);

  // Serves "/ps.proto.OptimizerStates/Read" and ".../Write" on `streams`,
  // which must not outlive this. Before the streams start.
  void AddTo(BlockingStreamService& streams);

  grpc::Status ServeRead(ByteStream& stream);
  grpc::Status ServeWrite(ByteStream& stream);

  // The plain halves of the calls, without a stream (for tests and the
  // handlers): the state of every slice, and the header describing it.
  absl::StatusOr<proto::OptimizerStateHeader> Read(
      const proto::RequestHeader& caller,
      std::vector<update::SliceSnapshot>* slices) const;
  // Checks `first` (the write's first message), reads the rest of the
  // write with `next` (false at its end) and applies it.
  absl::StatusOr<proto::WriteOptimizerStateResponse> Write(
      const proto::WriteOptimizerStateRequest& first,
      const std::function<
          absl::StatusOr<bool>(proto::WriteOptimizerStateRequest*)>& next);

 private:
  // The declared shard, if `caller` may make `what` there.
  absl::StatusOr<DeclaredShard*> Admit(const proto::RequestHeader& caller,
                                       absl::string_view what) const;

  ShardHost* const host_;
  const uint64_t default_chunk_elements_;
  const uint64_t max_chunk_elements_;
};

}  // namespace ps::server

#endif  // PS_SERVER_OPTIMIZER_STATE_SERVICE_H_
