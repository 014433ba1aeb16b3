#ifndef PS_CLIENT_OPTIMIZER_STATE_CALLS_H_
#define PS_CLIENT_OPTIMIZER_STATE_CALLS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/parameter_client.h"
#include "client/retry.h"
#include "common/partition.h"
#include "grpcpp/channel.h"
#include "proto/parameter_server.pb.h"

namespace ps::client_internal {

// One shard as the optimizer state calls reach it: over gRPC (they are
// rare and not on a step's path, so not over the same-host transport).
struct OptimizerStateShard {
  // "server I (ADDRESS)", as errors name it.
  std::string name;
  std::shared_ptr<grpc::Channel> channel;
  // What each request carries.
  proto::RequestHeader header;
};

// ParameterClient::ReadOptimizerState and WriteOptimizerState over
// `shards` (shard i of `partition` first), in chunks of `chunk_elements`,
// each shard's call retried as `retry` says (both calls are safe to
// repeat). Stateless: each call is independent; thread-safe as the
// channels are.
absl::StatusOr<OptimizerState> ReadOptimizerState(
    const Partition& partition, const std::vector<OptimizerStateShard>& shards,
    uint64_t chunk_elements, const RetryPolicy& retry);

absl::Status WriteOptimizerState(const Partition& partition,
                                 const std::vector<OptimizerStateShard>& shards,
                                 const OptimizerState& state,
                                 std::optional<uint64_t> at_version,
                                 uint64_t chunk_elements,
                                 const RetryPolicy& retry);

}  // namespace ps::client_internal

#endif  // PS_CLIENT_OPTIMIZER_STATE_CALLS_H_
