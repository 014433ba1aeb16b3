#ifndef PS_SERVER_GRPC_SERVER_H_
#define PS_SERVER_GRPC_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/blocking_stream_service.h"
#include "server/health_service.h"

namespace ps::server {

struct GrpcServerOptions {
  // Receive and send limit of every message.
  int max_message_bytes = 4 << 20;
  // Each call of the service in progress holds one of at most `max_threads`
  // threads (0: no bound); a call beyond them is refused with
  // RESOURCE_EXHAUSTED, so that clients that open calls and leave them
  // hanging cannot make the server hold without bound. stream_service
  // bounds its own calls.
  int max_threads = 0;
  // Served beside the service (the methods it marks generic); null: none.
  // Not owned; it must outlive the server. The server starts it and shuts
  // it down.
  BlockingStreamService* stream_service = nullptr;
  // Null: plaintext. See server/auth.h.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // -1: none. Else the health service alone is also served on this port of
  // the same host (0 picks a free one), in plaintext and without a token:
  // Kubernetes' gRPC probes speak neither TLS nor tokens.
  int health_port = -1;
};

// A running gRPC server for one service, with the standard health service
// (HealthService) beside it. Destroying it shuts the server down at once.
//
// Thread-safe as grpc::Server is: Shutdown may come from any thread.
class GrpcServer {
 public:
  // Listens on `address` ("127.0.0.1:0" picks a free port).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const std::string& address, grpc::Service* service,
      const std::string& service_name, const GrpcServerOptions& options);
  // Plaintext, no health port.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const std::string& address, grpc::Service* service,
      const std::string& service_name, int max_message_bytes,
      int max_threads = 0);

  ~GrpcServer();

  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  int port() const { return port_; }
  // The health-only port; 0 if there is none.
  int health_port() const { return health_port_; }

  // Health checks answer NOT_SERVING from now on (health watches end); calls
  // still running at `deadline` are cancelled. Returns once every handler
  // has returned. Idempotent.
  void Shutdown(absl::Time deadline = absl::InfiniteFuture());

 private:
  GrpcServer() = default;

  // Declared first: the servers, which call it, go first.
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  // Null without a health port.
  std::unique_ptr<grpc::Server> health_server_;
  BlockingStreamService* stream_service_ = nullptr;
  int port_ = 0;
  int health_port_ = 0;
};

}  // namespace ps::server

#endif  // PS_SERVER_GRPC_SERVER_H_
