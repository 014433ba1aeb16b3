#include "server/local_stream_server.h"

#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/peer_text.h"
#include "common/tcp_frames.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

// Hellos and method names are short; a larger frame there is not a client
// of ours.
constexpr size_t kMaxControlBytes = 1024;
// After a failed accept (out of descriptors): a pause before the next.
constexpr absl::Duration kAcceptRetryPause = absl::Milliseconds(100);

bool SameBytes(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;  // Compares every byte: no early exit to time.
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

absl::string_view View(const grpc::Slice& slice) {
  return absl::string_view(reinterpret_cast<const char*>(slice.begin()),
                           slice.size());
}

// Sends a refusal in place of the welcome.
void Refuse(LocalSocket& socket, grpc::StatusCode code,
            const std::string& message) {
  socket.Queue(FrameType::kStatus,
               EncodeStatusPayload(grpc::Status(code, message)));
  socket.Flush().IgnoreError();  // The connection is dropped either way.
}

// One call as its handler sees it, on the connection's socket.
class LocalCallStream final : public ByteStream {
 public:
  // `receiving` counts the bytes of frames being received on every
  // connection, at most `max_receiving_bytes`.
  LocalCallStream(LocalSocket& socket, absl::string_view method,
                  size_t max_message_bytes, std::atomic<size_t>* receiving,
                  size_t max_receiving_bytes)
      : socket_(socket),
        method_(method),
        max_message_bytes_(max_message_bytes),
        receiving_(*receiving),
        max_receiving_bytes_(max_receiving_bytes) {}

  bool Read(grpc::ByteBuffer* message) override {
    if (half_closed_ || broken_) return false;
    // The client may wait for what was written before it sends more.
    if (!Flush()) return false;
    Frame frame;
    if (!ReadFrame(&frame)) return false;
    if (frame.type == FrameType::kMessage) {
      *message = grpc::ByteBuffer(&frame.payload, 1);
      return true;
    }
    if (frame.type == FrameType::kHalfClose) {
      half_closed_ = true;
    } else {
      Break(absl::DataLossError(absl::StrCat(
          "frame of type ", static_cast<int>(frame.type), " within a call")));
    }
    return false;
  }

  bool Write(const grpc::ByteBuffer& message) override {
    if (broken_) return false;
    if (absl::Status s = socket_.QueueMessage(message); !s.ok()) {
      Break(s);
      return false;
    }
    return true;
  }

  // A handler asks while it waits, having read what it needed: the client
  // may since have half-closed (taken here), closed the connection, or
  // broken the protocol (both cancel).
  bool IsCancelled() override {
    if (!Flush()) return true;  // What was written leaves before a wait.
    while (!broken_ && socket_.HasInputOrHangup()) {
      Frame frame;
      if (!ReadFrame(&frame)) break;
      if (frame.type == FrameType::kHalfClose && !half_closed_) {
        half_closed_ = true;
      } else {
        Break(absl::DataLossError("the client sent more than the call takes"));
      }
    }
    return broken_;
  }

  // Sends the status, then drops what the client still sends up to its
  // half-close. Whether the connection can carry another call.
  bool Finish(const grpc::Status& status) {
    if (broken_) return false;
    socket_.Queue(FrameType::kStatus, EncodeStatusPayload(status));
    if (!Flush()) return false;
    Frame frame;
    while (!half_closed_) {
      if (!ReadFrame(&frame)) return false;
      if (frame.type == FrameType::kHalfClose) {
        half_closed_ = true;
      } else if (frame.type != FrameType::kMessage) {
        return false;
      }
    }
    return true;
  }

 private:
  bool Flush() {
    if (broken_) return false;
    absl::Status s = socket_.Flush();
    if (!s.ok()) Break(s);
    return s.ok();
  }

  bool ReadFrame(Frame* frame) {
    size_t reserved = 0;
    absl::Status s = socket_.ReadFrame(
        max_message_bytes_,
        [&](uint32_t length) {
          if (receiving_.fetch_add(length) + length > max_receiving_bytes_) {
            receiving_.fetch_sub(length);
            return absl::ResourceExhaustedError(absl::StrCat(
                "a message of ", length,
                " bytes would take the messages "
                "being received on this server's local connections past ",
                max_receiving_bytes_, " bytes"));
          }
          reserved = length;
          return absl::OkStatus();
        },
        frame);
    // Received whole (the handler holds it now) or not at all.
    receiving_.fetch_sub(reserved);
    if (!s.ok()) Break(s);
    return s.ok();
  }

  void Break(const absl::Status& why) {
    broken_ = true;
    if (absl::IsDeadlineExceeded(why) || absl::IsDataLoss(why) ||
        absl::IsResourceExhausted(why)) {
      spdlog::warn("cancelled a local {} call: {}", PeerText(method_),
                   std::string(why.message()));
    }
  }

  LocalSocket& socket_;
  const absl::string_view method_;
  const size_t max_message_bytes_;
  std::atomic<size_t>& receiving_;
  const size_t max_receiving_bytes_;
  bool half_closed_ = false;
  bool broken_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LocalStreamServer>> LocalStreamServer::Start(
    const StreamMethods* methods, const LocalStreamServerOptions& options) {
  absl::StatusOr<std::string> secret = NewLocalSecret();
  if (!secret.ok()) return secret.status();
  absl::StatusOr<std::string> name = NewLocalSocketName();
  if (!name.ok()) return name.status();
  absl::StatusOr<std::unique_ptr<LocalListener>> listener =
      LocalListener::Listen(*name);
  if (!listener.ok()) return listener.status();
  std::unique_ptr<LocalStreamServer> server(
      new LocalStreamServer(methods, options, *std::move(listener),
                            *std::move(name), *std::move(secret)));
  if (!options.tcp_host.empty()) {
    absl::StatusOr<TcpFrameListener> tcp =
        ListenTcpFrames(options.tcp_host, options.tcp_port);
    if (!tcp.ok()) return tcp.status();
    server->tcp_listener_ = std::move(tcp->listener);
    server->tcp_port_ = tcp->port;
    server->tcp_accept_thread_ =
        std::thread([s = server.get()] { s->AcceptLoop(*s->tcp_listener_); });
  }
  server->accept_thread_ =
      std::thread([s = server.get()] { s->AcceptLoop(*s->listener_); });
  return server;
}

LocalStreamServer::LocalStreamServer(const StreamMethods* methods,
                                     const LocalStreamServerOptions& options,
                                     std::unique_ptr<LocalListener> listener,
                                     std::string socket_name,
                                     std::string secret)
    : methods_(methods),
      options_(options),
      listener_(std::move(listener)),
      socket_name_(std::move(socket_name)),
      secret_(std::move(secret)) {}

LocalStreamServer::~LocalStreamServer() { Shutdown(); }

void LocalStreamServer::Shutdown(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    for (Connection& c : connections_) {
      if (!c.in_call) c.socket->Shutdown();
    }
  }
  listener_->Shutdown();
  if (tcp_listener_ != nullptr) tcp_listener_->Shutdown();
  if (accept_thread_.joinable()) accept_thread_.join();
  if (tcp_accept_thread_.joinable()) tcp_accept_thread_.join();
  std::list<Connection> connections;
  {
    absl::MutexLock lock(&mu_);
    auto all_ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const Connection& c : connections_) {
        if (!c.ended) return false;
      }
      return true;
    };
    mu_.AwaitWithDeadline(absl::Condition(&all_ended), deadline);
    for (Connection& c : connections_) c.socket->Shutdown();
    connections.swap(connections_);
  }
  for (Connection& c : connections) c.thread.join();
}

void LocalStreamServer::ReapLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->ended) {
      it->thread.join();  // Its last act was to set `ended`.
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void LocalStreamServer::AcceptLoop(LocalListener& listener) {
  for (;;) {
    absl::StatusOr<std::unique_ptr<LocalSocket>> socket = listener.Accept();
    if (!socket.ok()) {
      if (absl::IsCancelled(socket.status())) return;
      spdlog::warn("local transport: {}", socket.status().ToString());
      absl::SleepFor(kAcceptRetryPause);
      continue;
    }
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    ReapLocked();
    if (options_.max_connections > 0 &&
        connections_.size() >= static_cast<size_t>(options_.max_connections)) {
      // A new socket's buffer takes the refusal without waiting.
      Refuse(**socket, grpc::StatusCode::RESOURCE_EXHAUSTED,
             absl::StrCat("the server serves ", options_.max_connections,
                          " local connections already, its most at once"));
      continue;
    }
    Connection& connection = connections_.emplace_back();
    connection.socket = *std::move(socket);
    connection.thread = std::thread([this, &connection] { Serve(connection); });
  }
}

bool LocalStreamServer::Admit(LocalSocket& socket) {
  if (absl::Status s = socket.SetIdleTimeout(
          std::min(options_.hello_timeout, options_.idle_timeout));
      !s.ok()) {
    spdlog::warn("local transport: {}", s.ToString());
    return false;
  }
  // Over TCP the kernel cannot say who connected: the secret alone admits.
  absl::StatusOr<uid_t> peer = socket.PeerUid();
  if (!socket.is_tcp() && (!peer.ok() || *peer != geteuid())) {
    Refuse(socket, grpc::StatusCode::PERMISSION_DENIED,
           absl::StrCat("local connections are taken from processes of user ",
                        geteuid(), " only"));
    return false;
  }
  Frame hello;
  if (!socket.ReadFrame(kMaxControlBytes, &hello).ok() ||
      hello.type != FrameType::kHello ||
      !SameBytes(View(hello.payload), secret_)) {
    spdlog::warn("local transport: refused a connection without the secret");
    Refuse(socket, grpc::StatusCode::UNAUTHENTICATED,
           "the connection did not present this server's secret");
    return false;
  }
  socket.Queue(FrameType::kWelcome, "");
  absl::Status welcomed = socket.Flush();
  if (welcomed.ok()) welcomed = socket.SetIdleTimeout(options_.idle_timeout);
  return welcomed.ok();
}

void LocalStreamServer::Serve(Connection& connection) {
  LocalSocket& socket = *connection.socket;
  const int route = socket.is_tcp() ? kTcp : kUnix;
  if (Admit(socket)) {
    connections_admitted_[route].fetch_add(1);
    for (;;) {
      Frame call;
      // Fails once the client closed the connection, it stayed idle, or
      // Shutdown closed it.
      if (!socket.ReadFrame(kMaxControlBytes, &call).ok()) break;
      if (call.type != FrameType::kCall) {
        spdlog::warn(
            "local transport: a connection sent a frame of type {} "
            "where a call starts; closed it",
            static_cast<int>(call.type));
        break;
      }
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) break;
        connection.in_call = true;
      }
      calls_[route].fetch_add(1);
      const bool reusable = ServeCall(socket, View(call.payload));
      absl::MutexLock lock(&mu_);
      connection.in_call = false;
      if (!reusable || stopping_) break;
    }
  }
  // The client sees the end now; the descriptor is closed once reaped.
  socket.Shutdown();
  absl::MutexLock lock(&mu_);
  connection.ended = true;
}

bool LocalStreamServer::ServeCall(LocalSocket& socket,
                                  absl::string_view method) {
  LocalCallStream stream(
      socket, method, options_.max_message_bytes, &receiving_bytes_,
      std::max(options_.max_receiving_bytes, options_.max_message_bytes));
  const StreamHandler* handler = methods_->Find(method);
  if (handler == nullptr) {
    return stream.Finish(
        grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                     absl::StrCat("no method ", PeerText(method))));
  }
  return stream.Finish((*handler)(stream));
}

}  // namespace ps::server
