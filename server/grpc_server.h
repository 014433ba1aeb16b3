#ifndef PS_SERVER_GRPC_SERVER_H_
#define PS_SERVER_GRPC_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/health_service.h"

namespace ps::server {

// A running gRPC server for one service, with the standard health service
// (HealthService) beside it. Destroying it shuts the server down at once.
//
// Thread-safe as grpc::Server is: Shutdown may come from any thread.
class GrpcServer {
 public:
  // Listens on `address` ("127.0.0.1:0" picks a free port) with receive and
  // send limits of `max_message_bytes`. Each call in progress holds one of
  // at most `max_threads` threads (0: no bound); a call beyond them is
  // refused with RESOURCE_EXHAUSTED, so that clients that open calls and
  // leave them hanging cannot make the server hold without bound.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const std::string& address, grpc::Service* service,
      const std::string& service_name, int max_message_bytes,
      int max_threads = 0);

  ~GrpcServer();

  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  int port() const { return port_; }

  // Health checks answer NOT_SERVING from now on (health watches end); calls
  // still running at `deadline` are cancelled. Returns once every handler
  // has returned. Idempotent.
  void Shutdown(absl::Time deadline = absl::InfiniteFuture());

 private:
  GrpcServer() = default;

  // Declared first: the server, which calls it, goes first.
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace ps::server

#endif  // PS_SERVER_GRPC_SERVER_H_
