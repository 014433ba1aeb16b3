#ifndef PS_COMMON_EXIT_CODES_H_
#define PS_COMMON_EXIT_CODES_H_

// The exit codes of the server, the worker and the launcher: the contract
// with whatever supervises them (the launcher restarting its processes, a
// Kubernetes Job's podFailurePolicy in deploy/k8s/base/*.yaml, which names
// these constants in its comments), so that it can tell what is worth a
// retry.

namespace ps {

// Done: the job ended well (or a server was stopped by a signal after its
// final checkpoint, without --signal_exit_code).
inline constexpr int kExitOk = 0;
// Failed for a reason a retry may not meet again: retry a few times.
inline constexpr int kExitFailed = 1;
// Bad configuration (flags, data, model, a checkpoint of another run, a run
// that cannot be started, resumed or extended): a retry fails the same way,
// never retry.
inline constexpr int kExitBadConfig = 2;
// A worker lost the servers: one stayed unreachable past --retry_timeout.
// Worth a retry once they are back.
inline constexpr int kExitServersLost = 3;

// The shell's convention for a process stopped by signal `signal`.
constexpr int ExitCodeForSignal(int signal) { return 128 + signal; }
// A worker stopped by SIGTERM or SIGINT: 128 + SIGTERM (15).
inline constexpr int kExitTerminated = ExitCodeForSignal(15);

}  // namespace ps

#endif  // PS_COMMON_EXIT_CODES_H_
