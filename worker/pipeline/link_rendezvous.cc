#include "worker/pipeline/link_rendezvous.h"

#include <unistd.h>

#include <memory>
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

namespace ps::worker::pipeline {
namespace {

// A stranger's hello may not hold the listener up for long.
constexpr absl::Duration kHelloTimeout = absl::Seconds(10);
constexpr absl::Duration kRetryPause = absl::Milliseconds(50);

std::string Hello(uint64_t job_key, int replica, int stage) {
  return absl::StrFormat("%016x replica %d stage %d", job_key, replica, stage);
}

// The downstream side: says who it is, waits for the welcome.
absl::Status Introduce(LocalSocket& socket, const std::string& hello) {
  socket.Queue(FrameType::kHello, hello);
  if (absl::Status s = socket.Flush(); !s.ok()) return s;
  Frame frame;
  if (absl::Status s = socket.ReadFrame(0, &frame); !s.ok()) return s;
  if (frame.type != FrameType::kWelcome) {
    return absl::DataLossError("the listener did not welcome this stage");
  }
  return absl::OkStatus();
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

absl::StatusOr<std::unique_ptr<LocalListener>> ListenUntil(
    const std::string& name, absl::Time deadline) {
  while (true) {
    absl::StatusOr<std::unique_ptr<LocalListener>> listener =
        LocalListener::Listen(name);
    // A worker of this place in an earlier run may still hold the name
    // while it exits.
    if (listener.ok() || !absl::IsFailedPrecondition(listener.status()) ||
        absl::Now() > deadline) {
      return listener;
    }
    absl::SleepFor(kRetryPause);
  }
}

absl::StatusOr<std::unique_ptr<StageLink>> ConnectPrevious(
    const PipelinePlace& place, uint64_t job_key, absl::Time deadline,
    absl::Duration timeout, absl::Duration idle_timeout) {
  const LinkPeer peer{place.stage - 1, place.RankOf(place.stage - 1)};
  const std::string name =
      LinkSocketName(job_key, place.replica, place.stage - 1);
  absl::Status last;
  while (absl::Now() <= deadline) {
    absl::StatusOr<std::unique_ptr<LocalSocket>> socket =
        LocalSocket::Connect(name);
    if (socket.ok()) {
      // The predecessor welcomes it once its own predecessor is linked.
      last = (*socket)->SetIdleTimeout(timeout);
      if (last.ok()) {
        last = Introduce(**socket, Hello(job_key, place.replica, place.stage));
      }
      if (last.ok()) {
        if (absl::Status s = (*socket)->SetIdleTimeout(idle_timeout); !s.ok()) {
          return s;
        }
        return std::make_unique<StageLink>(*std::move(socket), peer);
      }
    } else {
      last = socket.status();
    }
    absl::SleepFor(kRetryPause);
  }
  return absl::DeadlineExceededError(absl::StrFormat(
      "%s of replica %d did not take this stage's link within %s (it runs on "
      "another host, or did not start): %s",
      peer.ToString(), place.replica, absl::FormatDuration(timeout),
      last.message()));
}

absl::StatusOr<std::unique_ptr<StageLink>> AcceptNext(
    const PipelinePlace& place, uint64_t job_key, LocalListener& listener,
    absl::Time deadline, absl::Duration timeout, absl::Duration idle_timeout) {
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
          "%s of replica %d did not connect within %s: %s", peer.ToString(),
          place.replica, absl::FormatDuration(timeout),
          socket.status().message()));
      break;
    }
    if (Admit(**socket, hello).ok() &&
        (*socket)->SetIdleTimeout(idle_timeout).ok()) {
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
                                             absl::Duration idle_timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::unique_ptr<LocalListener> listener;
  if (!place.last()) {
    absl::StatusOr<std::unique_ptr<LocalListener>> listening = ListenUntil(
        LinkSocketName(job_key, place.replica, place.stage), deadline);
    if (!listening.ok()) return listening.status();
    listener = *std::move(listening);
  }
  Neighbours neighbours;
  if (!place.first()) {
    absl::StatusOr<std::unique_ptr<StageLink>> previous =
        ConnectPrevious(place, job_key, deadline, timeout, idle_timeout);
    if (!previous.ok()) return previous.status();
    neighbours.previous = *std::move(previous);
  }
  if (listener != nullptr) {
    absl::StatusOr<std::unique_ptr<StageLink>> next =
        AcceptNext(place, job_key, *listener, deadline, timeout, idle_timeout);
    if (!next.ok()) return next.status();
    neighbours.next = *std::move(next);
  }
  return neighbours;
}

}  // namespace ps::worker::pipeline
