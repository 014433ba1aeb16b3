#ifndef PS_SERVER_HEALTH_SERVICE_H_
#define PS_SERVER_HEALTH_SERVICE_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/health.grpc.pb.h"

namespace ps::server {

// The standard gRPC health service (grpc.health.v1.Health), on gRPC's
// synchronous API like the rest of a shard.
//
// Kubernetes probes shards with it (deploy/k8s). gRPC's built-in one
// (grpc::EnableDefaultHealthCheckService) runs on the callback API, whose
// threads poll the server's sockets too: on a shard they took the push
// streams' reads away from the handler threads, one hand-off per message,
// and a 16 MiB push+pull with one shard ran 10-15% slower
// (bench/README.md).
//
// Check answers SERVING for "" (the whole server) and for each service name
// given, NOT_FOUND for any other; NOT_SERVING for all after Shutdown. Watch
// sends the status at once and again when it changes, until the caller
// cancels or the service shuts down.
//
// Thread-safe.
class HealthService final : public grpc::health::v1::Health::Service {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // `services`: full names of the services the server serves (e.g.
  // "ps.proto.ParameterServer").
  explicit HealthService(std::vector<std::string> services);

  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;

  // From now on every service is NOT_SERVING; running Watches say so and
  // end. Idempotent.
  void Shutdown();

  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>*
                         writer) override;

 private:
  ServingStatus StatusLocked(const std::string& service) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const std::vector<std::string> services_;
  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ps::server

#endif  // PS_SERVER_HEALTH_SERVICE_H_
