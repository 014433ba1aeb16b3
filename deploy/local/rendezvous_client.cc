#include "deploy/local/rendezvous_client.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace ps {
namespace {

// How often a wait asks again; also the most one call of a wait may take.
constexpr absl::Duration kPollInterval = absl::Milliseconds(200);
constexpr absl::Duration kCallTimeout = absl::Seconds(5);

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

// Whether the rendezvous did not answer (not there yet, or too slow),
// rather than refused.
bool NoAnswer(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

// Host 0 may start long after the others: reconnect soon after it does,
// not after gRPC's default backoff of up to two minutes.
std::shared_ptr<grpc::Channel> RendezvousChannel(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials,
    bool own_connection = false) {
  grpc::ChannelArguments arguments;
  if (own_connection) arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(address, std::move(credentials), arguments);
}

}  // namespace

RendezvousClient::RendezvousClient(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials)
    : address_(address),
      credentials_(std::move(credentials)),
      stub_(rendezvous::Rendezvous::NewStub(
          RendezvousChannel(address, credentials_))) {}

absl::StatusOr<JobPlan> RendezvousClient::Join(const HostJoin& join,
                                               absl::Time deadline) {
  const rendezvous::JoinRequest request = WriteJoin(join);
  bool answered = false;
  // Why the last call went unanswered: a refused TLS handshake (another
  // CA) looks like no answer, and only its message tells.
  std::string last_error;
  std::vector<int> waiting_for;
  // A connection of its own, made anew after each call left unanswered: a
  // TLS connection first tried before host 0 listened was seen to stall
  // (gRPC 1.51) and never finish its handshake.
  std::unique_ptr<rendezvous::Rendezvous::Stub> stub;
  while (true) {
    if (stub == nullptr) {
      stub = rendezvous::Rendezvous::NewStub(
          RendezvousChannel(address_, credentials_, /*own_connection=*/true));
    }
    rendezvous::JoinResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, std::min(kCallTimeout, deadline - absl::Now()));
    const absl::Status status =
        FromGrpcStatus(stub->Join(&context, request, &response));
    if (status.ok()) {
      answered = true;
      absl::StatusOr<JoinProgress> progress = ReadPlan(response);
      if (!progress.ok()) return progress.status();
      if (progress->plan.has_value()) {
        if (static_cast<int>(progress->plan->hosts.size()) != join.num_hosts) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the rendezvous planned ", progress->plan->hosts.size(),
              " hosts, not ", join.num_hosts));
        }
        return *std::move(progress->plan);
      }
      waiting_for = progress->waiting_for;
    } else if (!NoAnswer(status)) {
      return status;
    } else {
      last_error = std::string(status.message());
      stub.reset();
    }
    if (absl::Now() + kPollInterval >= deadline) break;
    absl::SleepFor(kPollInterval);
  }
  if (!answered) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the rendezvous at ", address_,
        " did not answer before --rendezvous_timeout ran out: is host 0's "
        "launch running, and is --rendezvous its address? With --auth, do "
        "both have the same --auth_ca? (last: ",
        last_error, ")"));
  }
  std::vector<std::string> names;
  for (int host : waiting_for) names.push_back(absl::StrCat(host));
  return absl::DeadlineExceededError(absl::StrCat(
      "host ", absl::StrJoin(names, ", "), " did not join the rendezvous at ",
      address_, " before --rendezvous_timeout ran out"));
}

absl::StatusOr<std::vector<std::string>> RendezvousClient::ExchangeServers(
    int host_index, const std::vector<std::string>& servers,
    absl::Time deadline, const std::function<bool()>& stopped) {
  rendezvous::ServersRequest request;
  request.set_host_index(host_index);
  for (const std::string& server : servers) request.add_servers(server);
  while (true) {
    rendezvous::ServersResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, std::min(kCallTimeout, deadline - absl::Now()));
    const absl::Status status =
        FromGrpcStatus(stub_->Servers(&context, request, &response));
    if (status.ok() && response.complete()) {
      return std::vector<std::string>(response.servers().begin(),
                                      response.servers().end());
    }
    if (!status.ok() && !NoAnswer(status)) return status;
    if (stopped && stopped()) {
      return absl::CancelledError("stopped while waiting for the other hosts");
    }
    if (absl::Now() + kPollInterval >= deadline) break;
    absl::SleepFor(kPollInterval);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("not every host's servers started within "
                   "--startup_timeout (rendezvous at ",
                   address_, ")"));
}

absl::StatusOr<std::string> RendezvousClient::Heartbeat(
    int host_index, absl::Duration timeout) {
  rendezvous::HeartbeatRequest request;
  request.set_host_index(host_index);
  rendezvous::HeartbeatResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  const absl::Status status =
      FromGrpcStatus(stub_->Heartbeat(&context, request, &response));
  if (!status.ok()) return status;
  return response.failure();
}

absl::Status RendezvousClient::Report(const HostReport& report,
                                      absl::Duration timeout) {
  rendezvous::OutcomeResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  return FromGrpcStatus(
      stub_->ReportOutcome(&context, WriteReport(report), &response));
}

absl::StatusOr<std::vector<HostStatus>> RendezvousClient::Status(
    absl::Duration timeout) {
  rendezvous::StatusResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  const absl::Status status = FromGrpcStatus(
      stub_->Status(&context, rendezvous::StatusRequest(), &response));
  if (!status.ok()) return status;
  return ReadStatus(response);
}

}  // namespace ps
