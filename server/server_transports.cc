#include "server/server_transports.h"

#include <cstdint>
#include <utility>

#include "common/tcp_frames.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/auth.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

ServiceOptions ServiceOptionsOf(const ServerConfig& config,
                                ServerMetrics* metrics) {
  ServiceOptions options;
  options.server_index = config.server_index;
  options.num_workers = config.coordinator.num_workers;
  options.job_id = config.job_id;
  options.refuse_non_finite = config.refuse_non_finite;
  options.max_calls_per_rank = config.max_calls_per_rank;
  options.stream_idle_timeout = config.stream_idle_timeout;
  options.metrics = metrics;
  options.max_threads = config.max_threads;
  // Leave room for the message's other fields.
  options.max_chunk_elements =
      static_cast<uint64_t>(config.max_message_bytes - (64 << 10)) / 4;
  return options;
}

CollectiveServiceOptions CollectiveOptionsOf(const ServerConfig& config) {
  CollectiveServiceOptions options;
  options.server_index = config.server_index;
  options.num_workers = config.coordinator.num_workers;
  options.job_id = config.job_id;
  return options;
}

}  // namespace

ServerTransports::ServerTransports(const ServerConfig& config, ShardHost* host,
                                   ServerMetrics* metrics)
    : config_(config),
      collectives_(CollectiveOptionsOf(config)),
      service_(host, ServiceOptionsOf(config, metrics)) {
  collectives_.AddTo(*service_.stream_service());
  if (!config.local_transport) return;
  LocalStreamServerOptions options;
  options.max_connections = config.max_threads;
  options.idle_timeout = config.stream_idle_timeout;
  options.max_message_bytes = config.max_message_bytes;
  // Tensors do not leave in clear where the server speaks TLS: workers on
  // other hosts then use gRPC.
  if (config.tcp_data_port >= 0 && !config.auth.tls()) {
    options.tcp_host = HostOfTarget(config.address);
    options.tcp_port = config.tcp_data_port;
  }
  const StreamMethods* methods = &service_.stream_service()->methods();
  absl::StatusOr<std::unique_ptr<LocalStreamServer>> started =
      LocalStreamServer::Start(methods, options);
  if (!started.ok() && !options.tcp_host.empty()) {
    // Workers on other hosts then use gRPC.
    spdlog::warn("no frames over TCP on {} port {}: {}", options.tcp_host,
                 options.tcp_port, started.status().ToString());
    options.tcp_host.clear();
    started = LocalStreamServer::Start(methods, options);
  }
  if (!started.ok()) {
    // Workers on this host then use gRPC, as workers elsewhere do.
    spdlog::warn("no same-host transport: {}", started.status().ToString());
    return;
  }
  local_ = *std::move(started);
  service_.AnnounceLocalEndpoint(local_->socket_name(), local_->secret(),
                                 local_->tcp_port());
  if (local_->tcp_port() > 0) {
    spdlog::info("serving frames over TCP to other hosts on port {}",
                 local_->tcp_port());
  }
  if (metrics != nullptr) {
    metrics_ = metrics;
    metrics->SetLocalTransportCounts([local = local_.get()] {
      return ServerMetrics::LocalTransportCounts{
          local->calls(), local->connections(), local->tcp_calls(),
          local->tcp_connections()};
    });
  }
}

ServerTransports::~ServerTransports() {
  // Scrapes stop reading the same-host transport before it goes.
  if (metrics_ != nullptr) metrics_->SetLocalTransportCounts(nullptr);
}

absl::Status ServerTransports::Listen() {
  GrpcServerOptions options;
  options.max_message_bytes = config_.max_message_bytes;
  options.max_threads = config_.max_threads;
  options.stream_service = service_.stream_service();
  if (config_.auth.tls()) {
    options.credentials = MakeServerCredentials(config_.auth);
  }
  options.health_port = config_.health_port;
  absl::StatusOr<std::unique_ptr<GrpcServer>> server =
      GrpcServer::Start(config_.address, &service_,
                        proto::ParameterServer::service_full_name(), options);
  if (!server.ok()) return server.status();
  grpc_ = *std::move(server);
  return absl::OkStatus();
}

int ServerTransports::port() const {
  return grpc_ != nullptr ? grpc_->port() : 0;
}

int ServerTransports::health_port() const {
  return grpc_ != nullptr ? grpc_->health_port() : 0;
}

void ServerTransports::StopListening() {
  if (grpc_ != nullptr) grpc_->Shutdown();
}

void ServerTransports::Shutdown(absl::Time deadline) {
  if (local_ != nullptr) {
    local_->Shutdown(deadline);
    spdlog::info(
        "same-host transport served {} calls on {} connections, and {} "
        "calls on {} connections over TCP",
        local_->calls(), local_->connections(), local_->tcp_calls(),
        local_->tcp_connections());
  }
  if (grpc_ != nullptr) grpc_->Shutdown(deadline);
  spdlog::info("final report:\n{}", service_.Report());
}

}  // namespace ps::server
