#include "client/shard_channel.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/connect.h"
#include "common/byte_stream_call.h"
#include "common/logging.h"
#include "common/tcp_frames.h"

namespace ps::client_internal {

ShardChannel::ShardChannel(int index, std::string address,
                           const std::shared_ptr<grpc::Channel>& channel,
                           uint64_t partition_fingerprint,
                           const ClientOptions& options,
                           FrameTimeouts frame_timeouts)
    : index_(index),
      address_(std::move(address)),
      name_(absl::StrCat("server ", index_, " (", address_, ")")),
      partition_fingerprint_(partition_fingerprint),
      rank_(options.rank),
      job_id_(options.job_id),
      local_transport_(options.local_transport),
      tcp_frames_(options.local_transport && options.tls_ca_file.empty()),
      retry_(RetryPolicy::FromOptions(options)),
      frame_timeouts_(frame_timeouts),
      stub_(proto::ParameterServer::NewStub(channel)),
      byte_stub_(std::make_unique<grpc::GenericStub>(channel)) {}

proto::RequestHeader ShardChannel::Header() const {
  proto::RequestHeader header;
  header.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  header.set_partition_fingerprint(partition_fingerprint_);
  header.set_worker_rank(rank_);
  header.set_server_index(index_);
  header.set_incarnation(incarnation_.load());
  header.set_job_id(job_id_);
  return header;
}

absl::Status ShardChannel::Annotate(const absl::Status& status) const {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(name_, ": ", status.message()));
}

absl::Status ShardChannel::CallWithRetry(
    absl::string_view what,
    const std::function<absl::Status()>& attempt) const {
  return Annotate(RetryWhileUnavailable(retry_, name_, what, attempt));
}

bool ShardChannel::HasLocalChannel() const {
  absl::MutexLock lock(&mu_);
  return local_channel_ != nullptr;
}

bool ShardChannel::UsesTcpFrames() const {
  absl::MutexLock lock(&mu_);
  return local_channel_ != nullptr && local_channel_->uses_tcp();
}

void ShardChannel::LearnLocalEndpoint(const proto::LocalEndpoint& endpoint) {
  if (!local_transport_ || endpoint.socket_name().empty()) return;
  const int tcp_port = tcp_frames_ ? endpoint.tcp_port() : 0;
  absl::MutexLock lock(&mu_);
  if ((local_channel_ != nullptr &&
       local_channel_->socket_name() == endpoint.socket_name() &&
       local_channel_->secret() == endpoint.secret() &&
       local_channel_->tcp_port() == tcp_port) ||
      unreachable_local_ == endpoint.socket_name()) {
    return;
  }
  local_channel_ = std::make_shared<LocalChannel>(
      endpoint.socket_name(), endpoint.secret(), kMaxMessageBytes,
      HostOfTarget(address_), tcp_port, frame_timeouts_);
  local_failed_once_ = false;
  spdlog::debug("{} announced a frame endpoint (TCP port {})", name_, tcp_port);
}

std::unique_ptr<ClientStream> ShardChannel::OpenStream(
    absl::string_view method) {
  const std::string path = absl::StrCat(
      "/", proto::ParameterServer::service_full_name(), "/", method);
  std::shared_ptr<LocalChannel> channel;
  {
    absl::MutexLock lock(&mu_);
    channel = local_channel_;
  }
  if (channel != nullptr) {
    absl::StatusOr<std::unique_ptr<LocalCall>> call = channel->StartCall(path);
    bool retry_frames = false;
    {
      absl::MutexLock lock(&mu_);
      if (local_channel_ == channel) {
        if (call.ok()) {
          local_failed_once_ = false;
        } else if (channel->has_worked() && !local_failed_once_) {
          // A route that worked is worth one more try (a shard restarting,
          // a link back soon) before the job leaves it for good.
          local_failed_once_ = true;
          retry_frames = true;
        } else {
          local_channel_ = nullptr;
          unreachable_local_ = channel->socket_name();
        }
      }
    }
    if (call.ok()) return *std::move(call);
    if (retry_frames) {
      spdlog::warn(
          "{}: its frame endpoint failed ({}); trying it once more "
          "before gRPC",
          name_, call.status().ToString());
      return std::make_unique<FailedClientStream>(grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("frame endpoint failed: ", call.status().ToString())));
    }
    // A shard on another host whose TCP port cannot be reached (or drops
    // packets), under another user, or gone: gRPC reaches it all the same.
    // A warning where frames over TCP were announced and should have
    // worked; without them (TLS, --tcp_data_port=-1) gRPC is the route
    // meant for another host.
    spdlog::log(
        channel->tcp_port() > 0 ? spdlog::level::warn : spdlog::level::info,
        "{}: not over its frame endpoint ({}); through gRPC", name_,
        call.status().ToString());
  }
  return std::make_unique<ByteStreamCall>(byte_stub_.get(), path);
}

}  // namespace ps::client_internal
