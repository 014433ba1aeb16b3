#ifndef PS_SERVER_REGISTER_HANDLER_H_
#define PS_SERVER_REGISTER_HANDLER_H_

#include "absl/status/status.h"
#include "proto/parameter_server.pb.h"
#include "server/request_header.h"
#include "server/shard_host.h"

namespace ps::server {

// Serves one parsed Register (ParameterService's Register method): checks
// the header against `shard` (this server's identity; its fingerprint is
// ignored, the declaration gives it), declares the request's model on
// `host` (rank 0 declares it, every other rank must match it and waits,
// UNAVAILABLE, until rank 0 sent the initial values it owes), registers
// the rank with the shard's coordinator, and fills `response`'s mode,
// worker count, version and the rank's progress. Every check runs before
// the host keeps a shard it built: a refused rank 0 leaves no model behind.
//
// On failure returns the reason, unprefixed, and leaves `response` as it
// was. Thread-safe as ShardHost::Declare is; `host` is not owned.
absl::Status ServeRegister(const proto::RegisterRequest& request,
                           const ShardIdentity& shard, ShardHost& host,
                           proto::RegisterResponse* response);

}  // namespace ps::server

#endif  // PS_SERVER_REGISTER_HANDLER_H_
