#include "common/stop_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// The live instance's pipe: the process's one piece of mutable global state,
// which a signal handler can reach only this way. -1: none.
std::atomic<int> live_write_fd{-1};

// Byte 0 is no signal: it tells the watching thread to end.
constexpr unsigned char kEnd = 0;

// Async-signal-safe.
void Send(int fd, unsigned char byte) {
  const int saved_errno = errno;
  (void)!write(fd, &byte, 1);
  errno = saved_errno;
}

void OnSignal(int signal) {
  const int fd = live_write_fd.load();
  if (fd >= 0) Send(fd, static_cast<unsigned char>(signal));
}

sigset_t SetOf(const std::vector<int>& signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : signals) sigaddset(&set, signal);
  return set;
}

absl::Status Errno(absl::string_view call) {
  return absl::InternalError(absl::StrCat(call, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StopSignals>> StopSignals::Install(
    std::vector<int> signals) {
  if (live_write_fd.load() >= 0) {
    return absl::FailedPreconditionError("stop signals are already installed");
  }
  const sigset_t set = SetOf(signals);
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) {
    return Errno("pthread_sigmask");
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Errno("pipe2");
  live_write_fd.store(fds[1]);
  std::vector<struct sigaction> previous(signals.size());
  struct sigaction action = {};
  action.sa_handler = &OnSignal;
  // A call in flight on a thread that took the signal goes on rather than
  // fail with EINTR.
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (size_t i = 0; i < signals.size(); ++i) {
    if (sigaction(signals[i], &action, &previous[i]) != 0) {
      const absl::Status status = Errno("sigaction");
      for (size_t j = 0; j < i; ++j)
        sigaction(signals[j], &previous[j], nullptr);
      live_write_fd.store(-1);
      close(fds[0]);
      close(fds[1]);
      return status;
    }
  }
  return std::unique_ptr<StopSignals>(
      new StopSignals(std::move(signals), fds[0], fds[1], std::move(previous)));
}

StopSignals::StopSignals(std::vector<int> signals, int read_fd, int write_fd,
                         std::vector<struct sigaction> previous)
    : signals_(std::move(signals)),
      read_fd_(read_fd),
      write_fd_(write_fd),
      previous_(std::move(previous)) {}

StopSignals::~StopSignals() {
  if (thread_.joinable()) {
    Send(write_fd_, kEnd);
    thread_.join();
  }
  for (size_t i = 0; i < signals_.size(); ++i) {
    sigaction(signals_[i], &previous_[i], nullptr);
  }
  live_write_fd.store(-1);
  close(read_fd_);
  close(write_fd_);
}

void StopSignals::Watch(std::function<void(int signal)> on_signal) {
  thread_ = std::thread([this, on_signal = std::move(on_signal)] {
    // The one thread the kernel may pick for the signals (besides threads
    // started before Install); pending ones arrive now.
    const sigset_t set = SetOf(signals_);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    while (true) {
      unsigned char byte = kEnd;
      const ssize_t n = read(read_fd_, &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n != 1 || byte == kEnd) break;
      on_signal(byte);
    }
    // Signals after the end wait in the mask, as before Watch.
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  });
}

}  // namespace ps
