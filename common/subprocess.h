#ifndef PS_COMMON_SUBPROCESS_H_
#define PS_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ps {

// How a child process ended: it exited with a code, or a signal killed it.
class ExitStatus {
 public:
  static ExitStatus Exited(int code) { return ExitStatus(false, code); }
  static ExitStatus Signaled(int signal) { return ExitStatus(true, signal); }

  bool exited() const { return !signaled_; }
  bool signaled() const { return signaled_; }
  // Meaningful only when exited() / signaled() respectively.
  int exit_code() const { return signaled_ ? -1 : value_; }
  int signal() const { return signaled_ ? value_ : 0; }
  // Exited with code 0.
  bool success() const { return !signaled_ && value_ == 0; }

  // "exited with code 3" or "killed by signal 9 (SIGKILL)".
  std::string ToString() const;

  bool operator==(const ExitStatus& other) const {
    return signaled_ == other.signaled_ && value_ == other.value_;
  }

 private:
  ExitStatus(bool signaled, int value) : signaled_(signaled), value_(value) {}

  bool signaled_;
  int value_;
};

struct SubprocessOptions {
  // argv[0] is the program: a path, or a name looked up in $PATH when it has
  // no '/'.
  std::vector<std::string> argv;
  // Variables set (or replaced) in the child on top of this process's
  // environment.
  std::vector<std::pair<std::string, std::string>> env;
  // Names the child in error messages; defaults to argv[0].
  std::string name;
  // Captured: stdout and stderr both go through one pipe, split into lines,
  // handed to `line_callback` and kept (the last `max_kept_lines`).
  // Not captured: the child writes to this process's stdout and stderr.
  bool capture_output = true;
  // Called on an internal thread for each line, without its '\n' (a final
  // line without one is delivered too). Must not destroy the Subprocess.
  std::function<void(absl::string_view line)> line_callback;
  // Called once on an internal thread when the child has exited, after its
  // last output line was delivered (or `output_drain_timeout` passed, if a
  // grandchild still holds the pipe open). Must not destroy the Subprocess.
  std::function<void(const ExitStatus&)> exit_callback;
  size_t max_kept_lines = 10000;
  // Longer lines are cut into pieces of this size.
  size_t max_line_bytes = 64 * 1024;
  absl::Duration output_drain_timeout = absl::Seconds(1);
  // Time the destructor (and Terminate) gives the child between SIGTERM and
  // SIGKILL.
  absl::Duration kill_grace = absl::Seconds(3);
  // Stdin comes from /dev/null unless this is set (then it is inherited).
  bool inherit_stdin = false;
  // Working directory of the child; empty: this process's.
  std::string working_dir;
};

// A child process, started in its own process group, that never outlives
// this object.
//
// Why: a launcher or a multi-process test starts servers and workers and must
// never leave one running, whatever path it returns by. The child gets its own
// process group so that a terminal's Ctrl-C reaches only the owner (which
// decides what to forward) and so that Kill() and the destructor reach the
// child's own children too. Signal mask and dispositions of common signals are
// reset in the child, so a launcher that blocks SIGINT/SIGTERM to sigwait() for
// them does not hand that mask down.
//
// The destructor sends SIGTERM to the group, SIGKILL after `kill_grace`, also
// SIGKILL to anything left in the group after the child itself has exited,
// then reaps the child and joins its threads.
//
// Thread-safety: every method may be called from any thread concurrently,
// except the destructor. The child is reaped only by the destructor (exit is
// observed with WNOWAIT), so its pid, and the group id, stay valid for signals
// as long as this object lives.
class Subprocess {
 public:
  // Starts the child. Fails (nothing left running) if argv is empty or the
  // program cannot be executed.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      SubprocessOptions options);

  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }

  // Sends `signal` to the child's process group. OK after the child exited.
  absl::Status Kill(int signal);

  // Blocks until the child exited (and its output was drained).
  ExitStatus Wait();
  // Like Wait(), but gives up after `timeout`; nullopt if still running.
  std::optional<ExitStatus> WaitFor(absl::Duration timeout);
  // The exit status if the child has exited, without blocking.
  std::optional<ExitStatus> TryWait() { return WaitFor(absl::ZeroDuration()); }

  // SIGTERM, then SIGKILL after `grace`; returns how the child ended.
  ExitStatus Terminate(absl::Duration grace);

  // The kept output lines, oldest first.
  std::vector<std::string> OutputLines() const;
  // The last `n` kept lines joined by '\n' (fewer if there are fewer).
  std::string LastLines(size_t n) const;
  // Waits for an output line containing `substring` (already kept ones
  // count) and returns it. DeadlineExceeded after `timeout`;
  // FailedPrecondition if the output ends without one.
  absl::StatusOr<std::string> WaitForOutputLine(absl::string_view substring,
                                                absl::Duration timeout);

 private:
  Subprocess(SubprocessOptions options, pid_t pid, int output_fd,
             int wake_read_fd, int wake_write_fd);

  void ReadOutput();  // Body of reader_.
  void WatchExit();   // Body of reaper_.
  void AddLine(std::string line);
  bool HasLineContaining(absl::string_view substring) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const SubprocessOptions options_;
  const std::string name_;
  const pid_t pid_;
  const int output_fd_;     // -1 when output is not captured.
  const int wake_read_fd_;  // Tells the reader to stop; -1 as above.
  const int wake_write_fd_;

  mutable absl::Mutex mu_;
  std::optional<ExitStatus> exit_status_ ABSL_GUARDED_BY(mu_);
  bool output_closed_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> lines_ ABSL_GUARDED_BY(mu_);

  // Started last in Start(), joined by the destructor.
  std::thread reader_;
  std::thread reaper_;
};

// Port files: a server started with --port=0 --port_file=PATH writes its bound
// port in decimal to PATH.tmp and renames it to PATH, so PATH is either absent
// or complete.

// Parses a port file's text: a decimal port in [1, 65535], surrounding
// whitespace allowed.
absl::StatusOr<int> ParsePort(absl::string_view text);

// Reads and parses PATH; NotFound while it does not exist yet.
absl::StatusOr<int> ReadPortFile(const std::string& path);

// Polls PATH until it exists and returns its port. DeadlineExceeded after
// `timeout`. If `child` is not null and exits first: FailedPrecondition with
// how it exited and its last output lines.
absl::StatusOr<int> WaitForPortFile(const std::string& path,
                                    absl::Duration timeout,
                                    Subprocess* child = nullptr);

}  // namespace ps

#endif  // PS_COMMON_SUBPROCESS_H_
