#include "client/connect.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/channel_auth.h"
#include "common/logging.h"
#include "grpcpp/grpcpp.h"
#include "proto/health.grpc.pb.h"

namespace ps::client_internal {
namespace {

// While connecting: how often the last connection error is logged, and how
// long the call that finds it out may take.
constexpr absl::Duration kConnectReportPeriod = absl::Seconds(10);
constexpr absl::Duration kConnectionErrorTimeout = absl::Seconds(1);

// Why `channel` is not connected, as gRPC says it ("failed to connect to
// all addresses; last error: ..."): a call that does not wait for the
// connection fails with it. Empty if the call went through after all.
std::string LastConnectionError(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext context;
  context.set_wait_for_ready(false);
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(kConnectionErrorTimeout));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = grpc::health::v1::Health::NewStub(channel)->Check(
      &context, request, &response);
  return status.ok() ? "" : status.error_message();
}

// Waits until `channel` to `address` is connected or `deadline` passes,
// logging the last connection error every kConnectReportPeriod meanwhile.
absl::Status WaitConnected(const ClientOptions& options,
                           const std::string& address,
                           const std::shared_ptr<grpc::Channel>& channel,
                           absl::Time start, absl::Time deadline) {
  absl::Time report = absl::Now() + kConnectReportPeriod;
  while (!channel->WaitForConnected(
      absl::ToChronoTime(std::min(deadline, report)))) {
    const std::string error = LastConnectionError(channel);
    const std::string hint = ConnectionHint(options, error);
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "parameter server ", address, " did not accept a connection within ",
          absl::FormatDuration(options.connect_timeout), ": ",
          error.empty() ? "it did not stay connected" : error, hint));
    }
    if (error.empty()) continue;  // Connected meanwhile.
    spdlog::warn(
        "parameter server {} not connected after {}, still trying: "
        "{}{}",
        address,
        absl::FormatDuration(
            absl::Trunc(absl::Now() - start, absl::Seconds(1))),
        error, hint);
    report = absl::Now() + kConnectReportPeriod;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> ConnectChannels(
    const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  if (!options.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options.connect_timeout;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const std::string& address : options.servers) {
    auto channel = grpc::CreateCustomChannel(address, *credentials, args);
    if (absl::Status s =
            WaitConnected(options, address, channel, start, deadline);
        !s.ok()) {
      return s;
    }
    channels.push_back(std::move(channel));
  }
  return channels;
}

}  // namespace ps::client_internal
