#include "server/grpc_server.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ps::server {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const std::string& address, grpc::Service* service,
    const std::string& service_name, int max_message_bytes, int max_threads) {
  std::unique_ptr<GrpcServer> server(new GrpcServer());
  server->health_ =
      std::make_unique<HealthService>(std::vector<std::string>{service_name});
  grpc::ServerBuilder builder;
  // gRPC shares ports by default (SO_REUSEPORT): a second server on our port
  // would split the workers between two jobs. Refuse instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.RegisterService(service);
  builder.RegisterService(server->health_.get());
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  builder.SetMaxSendMessageSize(max_message_bytes);
  if (max_threads > 0) {
    grpc::ResourceQuota quota("ps-server");
    quota.SetMaxThreads(max_threads);
    builder.SetResourceQuota(quota);
  }
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address, " (address in use or not local?)"));
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
}

}  // namespace ps::server
