#include "deploy/local/rendezvous_server.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace ps {

class RendezvousServer::Service final : public rendezvous::Rendezvous::Service {
 public:
  explicit Service(RendezvousState* state) : state_(state) {}

  grpc::Status Join(grpc::ServerContext*,
                    const rendezvous::JoinRequest* request,
                    rendezvous::JoinResponse* response) override {
    absl::StatusOr<HostJoin> join = ReadJoin(*request);
    if (!join.ok()) return ToGrpcStatus(join.status());
    absl::StatusOr<JoinProgress> progress = state_->Join(*join, absl::Now());
    if (!progress.ok()) return ToGrpcStatus(progress.status());
    *response = WritePlan(*progress);
    return grpc::Status::OK;
  }

  grpc::Status Servers(grpc::ServerContext*,
                       const rendezvous::ServersRequest* request,
                       rendezvous::ServersResponse* response) override {
    const std::vector<std::string> servers(request->servers().begin(),
                                           request->servers().end());
    absl::StatusOr<std::optional<std::vector<std::string>>> all =
        state_->Servers(request->host_index(), servers, absl::Now());
    if (!all.ok()) return ToGrpcStatus(all.status());
    response->set_complete(all->has_value());
    if (all->has_value()) {
      for (const std::string& server : **all) response->add_servers(server);
    }
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*,
                         const rendezvous::HeartbeatRequest* request,
                         rendezvous::HeartbeatResponse* response) override {
    absl::StatusOr<std::string> failure =
        state_->Heartbeat(request->host_index(), absl::Now());
    if (!failure.ok()) return ToGrpcStatus(failure.status());
    response->set_failure(*failure);
    return grpc::Status::OK;
  }

  grpc::Status ReportOutcome(grpc::ServerContext*,
                             const rendezvous::OutcomeRequest* request,
                             rendezvous::OutcomeResponse*) override {
    absl::StatusOr<HostReport> report = ReadReport(*request);
    if (!report.ok()) return ToGrpcStatus(report.status());
    return ToGrpcStatus(state_->Report(*report, absl::Now()));
  }

  grpc::Status Status(grpc::ServerContext*, const rendezvous::StatusRequest*,
                      rendezvous::StatusResponse* response) override {
    *response = WriteStatus(state_->Status(absl::Now()));
    return grpc::Status::OK;
  }

 private:
  RendezvousState* const state_;
};

RendezvousServer::RendezvousServer(std::unique_ptr<Service> service,
                                   std::unique_ptr<grpc::Server> server,
                                   int port)
    : service_(std::move(service)), server_(std::move(server)), port_(port) {}

RendezvousServer::~RendezvousServer() {
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
}

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    const std::string& listen, RendezvousState* state,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  auto service = std::make_unique<Service>(state);
  int port = 0;
  grpc::ServerBuilder builder;
  // A second launcher on the same port must fail, not share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(listen, std::move(credentials), &port);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("the rendezvous cannot listen on ", listen,
                     " (a port in use, or an address not of this host?)"));
  }
  return std::unique_ptr<RendezvousServer>(
      new RendezvousServer(std::move(service), std::move(server), port));
}

}  // namespace ps
