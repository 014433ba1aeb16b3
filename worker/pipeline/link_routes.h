#ifndef PS_WORKER_PIPELINE_LINK_ROUTES_H_
#define PS_WORKER_PIPELINE_LINK_ROUTES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/pipeline/pipeline_place.h"

namespace ps::worker::pipeline {

// The environment variable that carries a job's stage link secret to its
// workers: never a flag, so that it does not show in `ps` or in the logs.
inline constexpr char kStageLinkSecretVariable[] = "PS_STAGE_LINK_SECRET";

// Where a worker's links go when a neighbouring stage runs on another host:
// frames over TCP (common/tcp_frames.h) instead of the same-host socket.
// An empty address keeps that link on the same-host socket.
struct LinkRoutes {
  // "HOST:PORT" this stage listens at for the next stage
  // (--stage_link_listen).
  std::string listen;
  // "HOST:PORT" at which the previous stage listens (--stage_link_previous).
  std::string previous;
  // The job's link secret ($PS_STAGE_LINK_SECRET): over TCP the kernel
  // cannot say who connected, so the next stage presents it in its hello.
  std::string secret;

  bool any_tcp() const { return !listen.empty() || !previous.empty(); }
};

// The shortest secret admitted: a guess must be out of reach.
inline constexpr size_t kMinLinkSecretLength = 16;

// Checks `routes` for the worker at `place`, naming the flag at fault
// (InvalidArgument): addresses that are not HOST:PORT, --stage_link_listen
// on the last stage or --stage_link_previous on the first (they have no
// such neighbour), a TCP route without $PS_STAGE_LINK_SECRET of at least
// kMinLinkSecretLength visible characters, and a TCP route with TLS
// (`tls`): the frames are not encrypted, so a job that asked for TLS keeps
// its stages on one host.
absl::Status CheckLinkRoutes(const LinkRoutes& routes,
                             const PipelinePlace& place, bool tls);

// "HOST:PORT" split (HOST without an IPv6 address's brackets).
struct LinkAddress {
  std::string host;
  int port = 0;
};
absl::StatusOr<LinkAddress> ParseLinkAddress(absl::string_view flag,
                                             absl::string_view address);

// The hello the next stage sends over TCP, and the listener's check of it.
// It names the job, the replica and the stage (as the same-host hello
// does), this host's byte order (a message's floats are raw host-order
// bytes, so both ends must store them alike) and the secret.
std::string TcpHello(absl::string_view identity, absl::string_view secret);
// OK when `hello` is TcpHello(identity, secret) with this host's byte
// order; the secret is compared in constant time. PermissionDenied saying
// what did not match (never the secret).
absl::Status CheckTcpHello(absl::string_view hello, absl::string_view identity,
                           absl::string_view secret);
// The most bytes CheckTcpHello accepts.
size_t MaxTcpHelloBytes(absl::string_view identity);

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_LINK_ROUTES_H_
