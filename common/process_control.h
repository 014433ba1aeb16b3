#ifndef PS_COMMON_PROCESS_CONTROL_H_
#define PS_COMMON_PROCESS_CONTROL_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/stop_signals.h"

namespace ps {

// Checks that every flag on the command line exists and its value parses,
// so that such mistakes exit with the binary's bad-flag code like any other
// bad value (absl::ParseCommandLine would exit 1). Handles --name=value,
// --name value, --bool and --nobool.
absl::Status CheckFlagSyntax(int argc, char** argv);

// Writes `port` to `path` via `path.tmp` and rename, so a reader never sees
// a partial number.
absl::Status WritePortFile(const std::string& path, int port);

// Why the server should stop and with which exit code, set once (the first
// request wins) by the signal thread, the end of the job or a failure; main
// waits on it. Thread-safe.
class ShutdownRequest {
 public:
  struct Reason {
    std::string text;
    int exit_code = 0;
    // Asked for by a signal: a stop from outside, whatever the exit code,
    // rather than a failure.
    bool by_signal = false;
  };

  void Request(const std::string& reason, int exit_code = 0);
  void RequestBySignal(const std::string& reason, int exit_code);
  Reason Wait();
  bool requested();

 private:
  absl::Mutex mu_;
  Reason reason_ ABSL_GUARDED_BY(mu_);
};

// Turns each signal `signals` takes into request->RequestBySignal (with
// `exit_code`), on the signals' thread (StopSignals::Watch). The first
// request wins, so signals after it change nothing. `request` must outlive
// `signals`.
void RequestShutdownOnSignal(StopSignals* signals, int exit_code,
                             ShutdownRequest* request);

}  // namespace ps

#endif  // PS_COMMON_PROCESS_CONTROL_H_
