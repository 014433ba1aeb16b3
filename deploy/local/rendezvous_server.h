#ifndef PS_DEPLOY_LOCAL_RENDEZVOUS_SERVER_H_
#define PS_DEPLOY_LOCAL_RENDEZVOUS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "deploy/local/rendezvous_state.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "proto/rendezvous.grpc.pb.h"

namespace ps {

// Serves a RendezvousState over gRPC (proto/rendezvous.proto) with
// `credentials` (rendezvous_auth.h: TLS and the job token under --auth;
// plaintext by default: what travels is then the job's plan and outcomes,
// which the servers' own checks, --job_id, do not rely on).
//
// Thread-safety: gRPC's threads call the state, which is thread-safe.
// `state` is not owned and must outlive the server; the destructor stops
// serving and waits for calls in progress.
class RendezvousServer {
 public:
  // Listens on `listen`, "ADDRESS:PORT" (port 0: one of the kernel's).
  // Unavailable when it cannot listen there (e.g. the port is taken).
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Start(
      const std::string& listen, RendezvousState* state,
      std::shared_ptr<grpc::ServerCredentials> credentials =
          grpc::InsecureServerCredentials());
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const { return port_; }

 private:
  class Service;
  RendezvousServer(std::unique_ptr<Service> service,
                   std::unique_ptr<grpc::Server> server, int port);

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  const int port_;
};

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RENDEZVOUS_SERVER_H_
