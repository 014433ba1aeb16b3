#ifndef PS_SERVER_SERVER_TRANSPORTS_H_
#define PS_SERVER_SERVER_TRANSPORTS_H_

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/collective_service.h"
#include "server/grpc_server.h"
#include "server/local_stream_server.h"
#include "server/parameter_service.h"
#include "server/server_config.h"
#include "server/server_metrics.h"
#include "server/shard_host.h"

namespace ps::server {

// How calls reach the shard: ParameterService's handlers (and the
// collectives', server/collective_service.h), served over gRPC
// (TCP, authenticated as the flags say) and, with --local_transport, to
// workers on this host over the same-host transport (a Unix socket whose
// name and secret the gRPC port hands to registered workers) and, without
// TLS and unless --tcp_data_port=-1, to workers on other hosts as the same
// frames over TCP (admitted with that secret).
//
// Thread-compatible: one thread (main) starts and stops it. Destroying it
// stops gRPC, then the same-host transport, then the service whose handlers
// they run.
class ServerTransports {
 public:
  // Builds the service for `host` and, with config.local_transport, starts
  // the same-host transport; when that fails it logs why, and workers on
  // this host use gRPC as workers elsewhere do. `config`, `host` and
  // `metrics` (null: none) must outlive this; while the same-host
  // transport serves, its scrapes report that transport's counts.
  ServerTransports(const ServerConfig& config, ShardHost* host,
                   ServerMetrics* metrics);
  ~ServerTransports();

  ServerTransports(const ServerTransports&) = delete;
  ServerTransports& operator=(const ServerTransports&) = delete;

  // Serves gRPC on config.address (and the health port), once.
  // Unavailable naming the address when it cannot listen there.
  absl::Status Listen();

  // After Listen: the port bound, and the health-only port (0: none).
  int port() const;
  int health_port() const;
  // Whether workers on this host are served over the Unix socket.
  bool serves_local() const { return local_ != nullptr; }
  // The TCP port serving the same frames to workers on other hosts; 0:
  // none (--tcp_data_port=-1, TLS, or the port could not be taken).
  int tcp_port() const { return local_ != nullptr ? local_->tcp_port() : 0; }

  // Stops gRPC now (health checks answer NOT_SERVING, calls in progress are
  // cancelled): a start-up that fails after Listen.
  void StopListening();

  // Stops both transports, cancelling the calls still running at
  // `deadline`, then logs the same-host transport's counts and the
  // service's final report.
  void Shutdown(absl::Time deadline);

  // The final report's figures (ParameterService::ReportFields), for
  // --report_file.
  std::optional<ShardReport> ReportFields() const {
    return service_.ReportFields();
  }

 private:
  const ServerConfig& config_;
  // Reads the same-host transport's counts while it serves; null: none.
  ServerMetrics* metrics_ = nullptr;
  // Its method is served by service_'s streams: declared first, so it
  // outlives them.
  CollectiveService collectives_;
  ParameterService service_;
  // Declared after the service, whose handlers they run: destroyed first.
  std::unique_ptr<LocalStreamServer> local_;
  std::unique_ptr<GrpcServer> grpc_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SERVER_TRANSPORTS_H_
