#ifndef PS_COMMON_STOP_SIGNALS_H_
#define PS_COMMON_STOP_SIGNALS_H_

#include <signal.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// How the server, the worker and the launcher take the signals that stop
// them (SIGINT, SIGTERM, ...): the work happens on a plain thread, never
// inside a signal handler.
//
// Install, first thing in main before any thread starts, blocks the signals
// in the calling thread (so in every thread it starts later) and installs a
// handler that only writes the signal's number to a self-pipe. Watch starts
// the one thread that unblocks them and calls `on_signal` for each. Both
// parts are needed:
//  - the mask keeps the signals off the process's own threads (no EINTR in
//    their calls), and holds a signal that comes before Watch until it runs;
//  - the handler catches a signal that a thread started before main (an
//    OpenBLAS pool) takes with the signals unblocked, and makes PID 1 (a
//    container) receive signals the kernel spares it without a handler.
//
// One instance per process at a time (the handler writes to the live one's
// pipe). Thread-safety: Watch once, from any thread; the destructor ends the
// watching thread (waiting for an `on_signal` in progress) and restores the
// signals' previous handlers; they stay blocked in the threads that had
// them blocked.
class StopSignals {
 public:
  // FailedPrecondition when another instance lives; Internal when a system
  // call fails.
  static absl::StatusOr<std::unique_ptr<StopSignals>> Install(
      std::vector<int> signals);

  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  ~StopSignals();

  // Calls `on_signal(signal)` on a thread of its own for each signal taken,
  // from now (and for those held since Install) until destruction.
  // `on_signal` may end the process.
  void Watch(std::function<void(int signal)> on_signal);

 private:
  StopSignals(std::vector<int> signals, int read_fd, int write_fd,
              std::vector<struct sigaction> previous);

  const std::vector<int> signals_;
  const int read_fd_;
  const int write_fd_;
  const std::vector<struct sigaction> previous_;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_COMMON_STOP_SIGNALS_H_
