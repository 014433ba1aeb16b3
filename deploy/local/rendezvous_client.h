#ifndef PS_DEPLOY_LOCAL_RENDEZVOUS_CLIENT_H_
#define PS_DEPLOY_LOCAL_RENDEZVOUS_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "deploy/local/rendezvous_wire.h"
#include "grpcpp/security/credentials.h"
#include "proto/rendezvous.grpc.pb.h"

namespace ps {

// A host launcher's calls to the rendezvous (rendezvous_server.h) at
// "HOST:PORT", with `credentials` (rendezvous_auth.h; plaintext by
// default). The waits (Join, ExchangeServers) ask again every fraction
// of a second until the rendezvous says every host is there, retrying a
// rendezvous that does not answer yet (host 0 may start last), until their
// deadline.
//
// Errors: the rendezvous's own (InvalidArgument: the job's flags are at
// fault, naming host and flag; FailedPrecondition: the job failed
// elsewhere); DeadlineExceeded saying who was awaited, or that the
// rendezvous never answered (with its address, to check --rendezvous).
//
// Thread-safe (gRPC stubs are).
class RendezvousClient {
 public:
  explicit RendezvousClient(
      const std::string& address,
      std::shared_ptr<grpc::ChannelCredentials> credentials =
          grpc::InsecureChannelCredentials());

  const std::string& address() const { return address_; }

  // Joins and waits for every host; the job's plan.
  absl::StatusOr<JobPlan> Join(const HostJoin& join, absl::Time deadline);
  // Tells this host's servers and waits for every host's: every shard's
  // address, in shard order. Gives up (Cancelled) once `stopped()`.
  absl::StatusOr<std::vector<std::string>> ExchangeServers(
      int host_index, const std::vector<std::string>& servers,
      absl::Time deadline, const std::function<bool()>& stopped = nullptr);
  // One heartbeat: the job's failure, "" while none.
  absl::StatusOr<std::string> Heartbeat(int host_index, absl::Duration timeout);
  absl::Status Report(const HostReport& report, absl::Duration timeout);
  absl::StatusOr<std::vector<HostStatus>> Status(absl::Duration timeout);

 private:
  const std::string address_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::unique_ptr<rendezvous::Rendezvous::Stub> stub_;
};

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RENDEZVOUS_CLIENT_H_
