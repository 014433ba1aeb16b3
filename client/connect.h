#ifndef PS_CLIENT_CONNECT_H_
#define PS_CLIENT_CONNECT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/parameter_client.h"
#include "grpcpp/channel.h"

namespace ps::client_internal {

// The largest message a channel sends or accepts, gRPC's and same-host's.
inline constexpr int kMaxMessageBytes = 64 << 20;

// Connects a channel to every shard of `options.servers`, with the
// credentials the options ask for (client/channel_auth.h), waiting up to
// `options.connect_timeout` in all. InvalidArgument for bad authentication
// options; Unavailable naming the first shard that did not answer, with
// gRPC's last connection error and a hint. While waiting, the last
// connection error is logged now and then: a misconfigured TLS would
// otherwise look like a server not up yet for the whole connect_timeout.
absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> ConnectChannels(
    const ClientOptions& options);

}  // namespace ps::client_internal

#endif  // PS_CLIENT_CONNECT_H_
