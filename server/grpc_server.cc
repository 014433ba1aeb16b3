#include "server/grpc_server.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ps::server {
namespace {

// Probes make one short call at a time; a bound keeps a flood of them from
// holding threads.
constexpr int kHealthServerMaxThreads = 8;

// The host part of "host:port" (IPv6 hosts keep their brackets).
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const std::string& address, grpc::Service* service,
    const std::string& service_name, int max_message_bytes, int max_threads) {
  GrpcServerOptions options;
  options.max_message_bytes = max_message_bytes;
  options.max_threads = max_threads;
  return Start(address, service, service_name, options);
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const std::string& address, grpc::Service* service,
    const std::string& service_name, const GrpcServerOptions& options) {
  std::unique_ptr<GrpcServer> server(new GrpcServer());
  server->health_ =
      std::make_unique<HealthService>(std::vector<std::string>{service_name});
  const bool tls = options.credentials != nullptr;
  grpc::ServerBuilder builder;
  // gRPC shares ports by default (SO_REUSEPORT): a second server on our port
  // would split the workers between two jobs. Refuse instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(
      address, tls ? options.credentials : grpc::InsecureServerCredentials(),
      &server->port_);
  builder.RegisterService(service);
  builder.RegisterService(server->health_.get());
  if (options.stream_service != nullptr) {
    options.stream_service->AddTo(builder);
  }
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  if (options.max_threads > 0) {
    grpc::ResourceQuota quota("ps-server");
    quota.SetMaxThreads(options.max_threads);
    builder.SetResourceQuota(quota);
  }
  server->server_ = builder.BuildAndStart();
  if (server->server_ != nullptr && options.stream_service != nullptr) {
    server->stream_service_ = options.stream_service;
    server->stream_service_->Start();
  }
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address, " (address in use or not local?",
        tls ? " or gRPC refused --tls_cert/--tls_key: not a certificate and "
              "its matching private key?"
            : "",
        ")"));
  }
  if (options.health_port >= 0) {
    const std::string health_address =
        absl::StrCat(HostOf(address), ":", options.health_port);
    grpc::ServerBuilder health_builder;
    health_builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    health_builder.AddListeningPort(health_address,
                                    grpc::InsecureServerCredentials(),
                                    &server->health_port_);
    // A synchronous service may serve several servers: one status for both.
    health_builder.RegisterService(server->health_.get());
    grpc::ResourceQuota quota("ps-health");
    quota.SetMaxThreads(kHealthServerMaxThreads);
    health_builder.SetResourceQuota(quota);
    server->health_server_ = health_builder.BuildAndStart();
    if (server->health_server_ == nullptr || server->health_port_ == 0) {
      // The destructor stops the main server.
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", health_address,
                       " (--health_port in use or not local?)"));
    }
  }
  return server;
}

GrpcServer::~GrpcServer() {
  if (server_ != nullptr) Shutdown(absl::InfinitePast());
}

void GrpcServer::Shutdown(absl::Time deadline) {
  // First, so that health watches end instead of holding Shutdown up.
  health_->Shutdown();
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
  if (stream_service_ != nullptr) stream_service_->Shutdown();
  if (health_server_ != nullptr) {
    health_server_->Shutdown(absl::ToChronoTime(deadline));
    health_server_->Wait();
  }
}

}  // namespace ps::server
