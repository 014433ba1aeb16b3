#include "client/local_channel.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/tcp_frames.h"

namespace ps::client_internal {
namespace {

constexpr size_t kMaxControlBytes = 1024;

}  // namespace

LocalChannel::LocalChannel(std::string socket_name, std::string secret,
                           size_t max_message_bytes, std::string tcp_host,
                           int tcp_port, FrameTimeouts timeouts)
    : socket_name_(std::move(socket_name)),
      secret_(std::move(secret)),
      max_message_bytes_(max_message_bytes),
      tcp_host_(std::move(tcp_host)),
      tcp_port_(tcp_host_.empty() ? 0 : tcp_port),
      timeouts_(timeouts) {}

std::string LocalChannel::RouteName(bool tcp) const {
  return tcp ? absl::StrCat("TCP ", tcp_host_, ":", tcp_port_)
             : absl::StrCat("local socket ", socket_name_);
}

absl::StatusOr<std::unique_ptr<LocalSocket>> LocalChannel::Connect() {
  if (!unix_unreachable_.load()) {
    absl::StatusOr<std::unique_ptr<LocalSocket>> socket =
        LocalSocket::Connect(socket_name_);
    if (socket.ok()) {
      absl::StatusOr<uid_t> peer = (*socket)->PeerUid();
      if (!peer.ok()) return peer.status();
      if (*peer != geteuid()) {
        // Not the shard that announced it: the shard runs as this user too,
        // or it would refuse us.
        return absl::PermissionDeniedError(
            absl::StrCat("local socket ", socket_name_, " belongs to user ",
                         *peer, ", not to this process's user ", geteuid()));
      }
      if (absl::Status s = Handshake(**socket); !s.ok()) return s;
      worked_.store(true);
      return socket;
    }
    // Not on this host (or not in this network namespace).
    if (tcp_port_ == 0 || !absl::IsUnavailable(socket.status())) {
      return socket.status();
    }
    unix_unreachable_.store(true);
  }
  absl::StatusOr<std::unique_ptr<LocalSocket>> socket =
      ConnectTcpFrames(tcp_host_, tcp_port_, timeouts_.connect);
  if (!socket.ok()) return socket.status();
  if (absl::Status s = Handshake(**socket); !s.ok()) return s;
  worked_.store(true);
  return socket;
}

absl::Status LocalChannel::Handshake(LocalSocket& socket) const {
  if (absl::Status s = socket.SetIdleTimeout(timeouts_.handshake); !s.ok()) {
    return s;
  }
  socket.Queue(FrameType::kHello, secret_);
  // A server that refuses at once (too many connections) may have closed
  // before the hello arrived: its refusal is still there to read.
  const absl::Status sent = socket.Flush();
  Frame answer;
  if (absl::Status s = socket.ReadFrame(kMaxControlBytes, &answer); !s.ok()) {
    return sent.ok() ? s : sent;
  }
  if (answer.type == FrameType::kStatus) {
    absl::StatusOr<grpc::Status> refusal = DecodeStatusPayload(answer.payload);
    if (!refusal.ok()) return refusal.status();
    return FromGrpcStatus(*refusal);
  }
  if (answer.type != FrameType::kWelcome) {
    return absl::DataLossError(absl::StrCat(
        RouteName(socket.is_tcp()), " answered a hello with a frame of type ",
        static_cast<int>(answer.type)));
  }
  return socket.SetIdleTimeout(absl::InfiniteDuration());
}

absl::StatusOr<std::unique_ptr<LocalCall>> LocalChannel::StartCall(
    absl::string_view method) {
  std::unique_ptr<LocalSocket> socket;
  {
    absl::MutexLock lock(&mu_);
    while (socket == nullptr && !idle_.empty()) {
      socket = std::move(idle_.back());
      idle_.pop_back();
      // A kept connection has nothing to read: anything there is the
      // shard's hang-up (it closes connections idle for long, or it ended).
      if (socket->HasInputOrHangup()) socket.reset();
    }
  }
  if (socket == nullptr) {
    absl::StatusOr<std::unique_ptr<LocalSocket>> connected = Connect();
    if (!connected.ok()) return connected.status();
    socket = *std::move(connected);
  }
  return absl::WrapUnique(
      new LocalCall(shared_from_this(), std::move(socket), method));
}

void LocalChannel::Keep(std::unique_ptr<LocalSocket> socket) {
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(socket));
}

LocalCall::LocalCall(std::shared_ptr<LocalChannel> channel,
                     std::unique_ptr<LocalSocket> socket,
                     absl::string_view method)
    : channel_(std::move(channel)), socket_(std::move(socket)) {
  socket_->Queue(FrameType::kCall, method);
}

// Without Finish, the connection is closed: the shard cancels the call.
LocalCall::~LocalCall() = default;

void LocalCall::Break(const absl::Status& why) {
  if (broken_) return;
  broken_ = true;
  // UNAVAILABLE stays UNAVAILABLE, so that the caller retries.
  status_ = ToGrpcStatus(absl::Status(
      why.code(),
      absl::StrCat("frame connection to ",
                   channel_->RouteName(socket_ != nullptr && socket_->is_tcp()),
                   ": ", why.message())));
}

bool LocalCall::Flush() {
  if (broken_) return false;
  if (absl::Status s = socket_->Flush(); !s.ok()) {
    Break(s);
    return false;
  }
  return true;
}

bool LocalCall::Write(const grpc::ByteBuffer& message) {
  if (broken_ || writes_done_) return false;
  if (absl::Status s = socket_->QueueMessage(message); !s.ok()) {
    Break(s);
    return false;
  }
  return true;
}

bool LocalCall::WriteLast(const grpc::ByteBuffer& message) {
  return Write(message) && WritesDone();
}

bool LocalCall::WritesDone() {
  if (broken_) return false;
  if (writes_done_) return true;
  writes_done_ = true;
  socket_->Queue(FrameType::kHalfClose, "");
  return Flush();
}

bool LocalCall::Read(grpc::ByteBuffer* message) {
  if (broken_ || has_status_ || finished_) return false;
  if (!Flush()) return false;  // The shard may wait for what is queued.
  Frame frame;
  if (absl::Status s = socket_->ReadFrame(channel_->max_message_bytes_, &frame);
      !s.ok()) {
    Break(s);
    return false;
  }
  switch (frame.type) {
    case FrameType::kMessage:
      *message = grpc::ByteBuffer(&frame.payload, 1);
      return true;
    case FrameType::kStatus: {
      absl::StatusOr<grpc::Status> status = DecodeStatusPayload(frame.payload);
      if (!status.ok()) {
        Break(status.status());
      } else {
        has_status_ = true;
        status_ = *status;
      }
      return false;
    }
    default:
      Break(absl::DataLossError(absl::StrCat(
          "frame of type ", static_cast<int>(frame.type), " within a call")));
      return false;
  }
}

grpc::Status LocalCall::Finish() {
  if (finished_) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "the call was finished already");
  }
  // The shard drops what a call still sends once it answered, up to the
  // half-close: then the connection can carry the next call.
  WritesDone();
  grpc::ByteBuffer ignored;
  while (Read(&ignored)) {
  }
  finished_ = true;
  if (!broken_) channel_->Keep(std::move(socket_));
  return status_;
}

}  // namespace ps::client_internal
