#include "server/server_transports.h"

#include <cstdint>
#include <utility>

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
  absl::StatusOr<std::unique_ptr<LocalStreamServer>> started =
      LocalStreamServer::Start(&service_.stream_service()->methods(), options);
  if (!started.ok()) {
    // Workers on this host then use gRPC, as workers elsewhere do.
    spdlog::warn("no same-host transport: {}", started.status().ToString());
    return;
  }
  local_ = *std::move(started);
  service_.AnnounceLocalEndpoint(local_->socket_name(), local_->secret());
  if (metrics != nullptr) {
    metrics_ = metrics;
    metrics->SetLocalTransportCounts([local = local_.get()] {
      return ServerMetrics::LocalTransportCounts{local->calls(),
                                                 local->connections()};
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
    spdlog::info("same-host transport served {} calls on {} connections",
                 local_->calls(), local_->connections());
  }
  if (grpc_ != nullptr) grpc_->Shutdown(deadline);
  spdlog::info("final report:\n{}", service_.Report());
}

}  // namespace ps::server
