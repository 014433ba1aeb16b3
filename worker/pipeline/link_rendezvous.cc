#include "worker/pipeline/link_rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/fingerprint.h"
#include "common/local_socket.h"
#include "common/tcp_frames.h"
#include "grpcpp/support/status.h"
#include "worker/pipeline/link_routes.h"

namespace ps::worker::pipeline {
namespace {

// A stranger's hello may not hold the listener up for long.
constexpr absl::Duration kHelloTimeout = absl::Seconds(10);
constexpr absl::Duration kRetryPause = absl::Milliseconds(50);

std::string Hello(uint64_t job_key, int replica, int stage) {
  return absl::StrFormat("%016x replica %d stage %d", job_key, replica, stage);
}

// The longest refusal a listener sends over TCP.
constexpr size_t kMaxRefusalBytes = 4096;

// The downstream side: says who it is, waits for the welcome. Over TCP a
// listener that refuses says why (PermissionDenied).
absl::Status Introduce(LocalSocket& socket, const std::string& hello) {
  socket.Queue(FrameType::kHello, hello);
  if (absl::Status s = socket.Flush(); !s.ok()) return s;
  Frame frame;
  if (absl::Status s = socket.ReadFrame(kMaxRefusalBytes, &frame); !s.ok()) {
    return s;
  }
  if (frame.type == FrameType::kStatus) {
    absl::StatusOr<grpc::Status> refusal = DecodeStatusPayload(frame.payload);
    return absl::PermissionDeniedError(
        absl::StrCat("the previous stage refused this one: ",
                     refusal.ok() ? refusal->error_message() : "(unreadable)"));
  }
  if (frame.type != FrameType::kWelcome) {
    return absl::DataLossError("the listener did not welcome this stage");
  }
  return absl::OkStatus();
}

// Over TCP: admits the next stage by its hello (link_routes.h), and tells
// a peer it refuses why, so that a stage given a wrong secret or started
// on a host of another byte order fails at once, saying so.
absl::Status AdmitTcp(LocalSocket& socket, const std::string& identity,
                      const std::string& secret) {
  if (absl::Status s = socket.SetIdleTimeout(kHelloTimeout); !s.ok()) return s;
  Frame frame;
  if (absl::Status s = socket.ReadFrame(MaxTcpHelloBytes(identity), &frame);
      !s.ok()) {
    return s;
  }
  absl::Status admitted =
      frame.type != FrameType::kHello
          ? absl::PermissionDeniedError("no hello")
          : CheckTcpHello(absl::string_view(reinterpret_cast<const char*>(
                                                frame.payload.begin()),
                                            frame.payload.size()),
                          identity, secret);
  if (!admitted.ok()) {
    socket.Queue(FrameType::kStatus, EncodeStatusPayload(grpc::Status(
                                         grpc::StatusCode::PERMISSION_DENIED,
                                         std::string(admitted.message()))));
    (void)socket.Flush();
    return admitted;
  }
  socket.Queue(FrameType::kWelcome, "");
  return socket.Flush();
}

// The upstream side: admits a process of this user that says `hello`.
absl::Status Admit(LocalSocket& socket, const std::string& hello) {
  absl::StatusOr<uid_t> uid = socket.PeerUid();
  if (!uid.ok()) return uid.status();
  if (*uid != geteuid()) {
    return absl::PermissionDeniedError(
        absl::StrCat("a process of user ", *uid, " connected"));
  }
  if (absl::Status s = socket.SetIdleTimeout(kHelloTimeout); !s.ok()) return s;
  Frame frame;
  if (absl::Status s = socket.ReadFrame(hello.size(), &frame); !s.ok()) {
    return s;
  }
  if (frame.type != FrameType::kHello ||
      std::string(reinterpret_cast<const char*>(frame.payload.begin()),
                  frame.payload.size()) != hello) {
    return absl::PermissionDeniedError(
        "a process that is not the next stage connected");
  }
  socket.Queue(FrameType::kWelcome, "");
  return socket.Flush();
}

// Listens for the next stage: at the same-host socket's name, or over TCP
// at `routes.listen`.
absl::StatusOr<std::unique_ptr<LocalListener>> ListenUntil(
    const std::string& name, const LinkRoutes& routes, absl::Time deadline) {
  std::optional<LinkAddress> tcp;
  if (!routes.listen.empty()) {
    absl::StatusOr<LinkAddress> address =
        ParseLinkAddress("stage_link_listen", routes.listen);
    if (!address.ok()) return address.status();
    tcp = *address;
  }
  while (true) {
    absl::StatusOr<std::unique_ptr<LocalListener>> listener =
        absl::UnknownError("");
    if (tcp.has_value()) {
      absl::StatusOr<TcpFrameListener> bound =
          ListenTcpFrames(tcp->host, tcp->port);
      listener =
          bound.ok()
              ? std::move(bound->listener)
              : absl::StatusOr<std::unique_ptr<LocalListener>>(bound.status());
    } else {
      listener = LocalListener::Listen(name);
    }
    // A worker of this place in an earlier run may still hold the name or
    // port while it exits.
    if (listener.ok() || !absl::IsFailedPrecondition(listener.status())) {
      return listener;
    }
    if (absl::Now() > deadline) {
      if (!tcp.has_value()) return listener;
      // The launcher reserved the port and let it go before this worker
      // started; another process may have taken it in between.
      return absl::FailedPreconditionError(absl::StrCat(
          listener.status().message(),
          ": the port the launcher reserved for this stage's link "
          "(--stage_link_listen) is taken by another process; start the "
          "job again"));
    }
    absl::SleepFor(kRetryPause);
  }
}

// One attempt to reach the previous stage, within `timeout`.
absl::StatusOr<std::unique_ptr<LocalSocket>> DialPrevious(
    const std::string& name, const std::optional<LinkAddress>& tcp,
    absl::Duration timeout) {
  if (!tcp.has_value()) return LocalSocket::Connect(name);
  return ConnectTcpFrames(tcp->host, tcp->port, timeout);
}

absl::StatusOr<std::unique_ptr<StageLink>> ConnectPrevious(
    const PipelinePlace& place, uint64_t job_key, const LinkRoutes& routes,
    absl::Time deadline, absl::Duration timeout, absl::Duration idle_timeout) {
  const LinkPeer peer{place.stage - 1, place.RankOf(place.stage - 1)};
  const std::string name =
      LinkSocketName(job_key, place.replica, place.stage - 1);
  std::optional<LinkAddress> tcp;
  std::string hello = Hello(job_key, place.replica, place.stage);
  if (!routes.previous.empty()) {
    absl::StatusOr<LinkAddress> address =
        ParseLinkAddress("stage_link_previous", routes.previous);
    if (!address.ok()) return address.status();
    tcp = *address;
    hello = TcpHello(hello, routes.secret);
  }
  absl::Status last;
  while (absl::Now() <= deadline) {
    absl::StatusOr<std::unique_ptr<LocalSocket>> socket =
        DialPrevious(name, tcp,
                     std::clamp(deadline - absl::Now(), absl::Milliseconds(1),
                                kHelloTimeout));
    if (socket.ok()) {
      // The predecessor welcomes it once its own predecessor is linked.
      last = (*socket)->SetIdleTimeout(timeout);
      if (last.ok()) last = Introduce(**socket, hello);
      if (last.ok()) {
        if (absl::Status s = (*socket)->SetIdleTimeout(idle_timeout); !s.ok()) {
          return s;
        }
        return std::make_unique<StageLink>(*std::move(socket), peer);
      }
      // A refusal will not change: the secret or the host is wrong.
      if (absl::IsPermissionDenied(last)) {
        return absl::PermissionDeniedError(
            absl::StrFormat("%s of replica %d at %s: %s", peer.ToString(),
                            place.replica, routes.previous, last.message()));
      }
    } else {
      last = socket.status();
    }
    absl::SleepFor(kRetryPause);
  }
  return absl::DeadlineExceededError(absl::StrFormat(
      "%s of replica %d did not take this stage's link within %s (%s): %s",
      peer.ToString(), place.replica, absl::FormatDuration(timeout),
      tcp.has_value() ? absl::StrCat("over TCP at ", routes.previous,
                                     ", --stage_link_previous")
                      : "on this host: it runs on another host, or did not "
                        "start",
      last.message()));
}

absl::StatusOr<std::unique_ptr<StageLink>> AcceptNext(
    const PipelinePlace& place, uint64_t job_key, const LinkRoutes& routes,
    LocalListener& listener, absl::Time deadline, absl::Duration timeout,
    absl::Duration idle_timeout) {
  const LinkPeer peer{place.stage + 1, place.RankOf(place.stage + 1)};
  const std::string hello = Hello(job_key, place.replica, place.stage + 1);
  absl::Notification done;
  std::thread watchdog([&] {
    if (!done.WaitForNotificationWithDeadline(deadline)) listener.Shutdown();
  });
  absl::StatusOr<std::unique_ptr<StageLink>> link =
      absl::DeadlineExceededError("");
  while (true) {
    absl::StatusOr<std::unique_ptr<LocalSocket>> socket = listener.Accept();
    if (!socket.ok()) {
      link = absl::DeadlineExceededError(absl::StrFormat(
          "%s of replica %d did not connect within %s%s: %s", peer.ToString(),
          place.replica, absl::FormatDuration(timeout),
          routes.listen.empty() ? ""
                                : absl::StrCat(" over TCP to ", routes.listen,
                                               " (--stage_link_listen)"),
          socket.status().message()));
      break;
    }
    const absl::Status admitted = (*socket)->is_tcp()
                                      ? AdmitTcp(**socket, hello, routes.secret)
                                      : Admit(**socket, hello);
    if (admitted.ok() && (*socket)->SetIdleTimeout(idle_timeout).ok()) {
      link = std::make_unique<StageLink>(*std::move(socket), peer);
      break;
    }
  }
  done.Notify();
  watchdog.join();
  return link;
}

}  // namespace

uint64_t JobKey(absl::string_view job_id, absl::string_view servers) {
  return Fingerprint().Add(job_id).Add("\n").Add(servers).value();
}

std::string LinkSocketName(uint64_t job_key, int replica, int stage) {
  return absl::StrFormat("paramserver-pipeline-%016x-r%d-s%d", job_key, replica,
                         stage);
}

absl::StatusOr<Neighbours> ConnectNeighbours(const PipelinePlace& place,
                                             uint64_t job_key,
                                             absl::Duration timeout,
                                             absl::Duration idle_timeout,
                                             const LinkRoutes& routes) {
  const absl::Time deadline = absl::Now() + timeout;
  std::unique_ptr<LocalListener> listener;
  if (!place.last()) {
    absl::StatusOr<std::unique_ptr<LocalListener>> listening = ListenUntil(
        LinkSocketName(job_key, place.replica, place.stage), routes, deadline);
    if (!listening.ok()) return listening.status();
    listener = *std::move(listening);
  }
  Neighbours neighbours;
  if (!place.first()) {
    absl::StatusOr<std::unique_ptr<StageLink>> previous = ConnectPrevious(
        place, job_key, routes, deadline, timeout, idle_timeout);
    if (!previous.ok()) return previous.status();
    neighbours.previous = *std::move(previous);
  }
  if (listener != nullptr) {
    absl::StatusOr<std::unique_ptr<StageLink>> next = AcceptNext(
        place, job_key, routes, *listener, deadline, timeout, idle_timeout);
    if (!next.ok()) return next.status();
    neighbours.next = *std::move(next);
  }
  return neighbours;
}

}  // namespace ps::worker::pipeline
