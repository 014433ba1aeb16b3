#ifndef PS_DEPLOY_LOCAL_LOCAL_CLUSTER_H_
#define PS_DEPLOY_LOCAL_LOCAL_CLUSTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "deploy/local/cluster_output.h"

namespace ps {

// What a local cluster runs. Commands are built per process, so tests can run
// shell stand-ins through the same orchestration as the real binaries.
struct ClusterSpec {
  // This host's servers and workers. On one host of several (the
  // multi-host launcher), server indexes start at first_server and worker
  // ranks at first_rank; the commands, names and logs use those. A host may
  // run no servers or no workers: without workers, the host's work is done
  // when its servers exit (once the job's workers on other hosts said they
  // are done).
  int num_servers = 1;
  int num_workers = 1;
  int first_server = 0;
  int first_rank = 0;
  // argv of server `index`, listening on `port` (0: one of its choice, or a
  // fixed one the command knows); the server must write its port to
  // `port_file` (PATH.tmp, then rename). A restarted server is given the
  // port it had, so that the workers find it again.
  std::function<std::vector<std::string>(int index, int port,
                                         const std::string& port_file)>
      server_command;
  // argv of worker `rank`, given "host:port" of every server in index order.
  std::function<std::vector<std::string>(
      int rank, const std::vector<std::string>& servers)>
      worker_command;
  // Variables set in worker `rank`'s environment on top of the launcher's;
  // none if empty.
  std::function<std::vector<std::pair<std::string, std::string>>(
      int rank, const std::vector<std::string>& servers)>
      worker_environment;
  // Once every worker has exited 0, stop the servers at once rather than
  // give them shutdown_timeout to exit on their own: for worker programs
  // that may never tell the servers they are done.
  bool stop_servers_after_workers = false;
  // Where the servers listen.
  std::string host = "127.0.0.1";
  // Given this host's servers' "host:port" (in index order), returns every
  // server of the job, which the workers are given; called once, after the
  // servers listen. It should give up soon after `stopped()` turns true (a
  // stop request or Abort). Empty: this host's servers are the job's.
  std::function<absl::StatusOr<std::vector<std::string>>(
      const std::vector<std::string>& local,
      const std::function<bool()>& stopped)>
      exchange_servers;
  // Servers must all have written their port file within this.
  absl::Duration startup_timeout = absl::Seconds(60);
  // After the workers succeed, servers get this long to exit on their own.
  absl::Duration shutdown_timeout = absl::Seconds(30);
  // Between the stop signal and SIGKILL.
  absl::Duration kill_grace = absl::Seconds(5);
  // Parent of the run's temporary directory; empty: $TMPDIR or /tmp.
  std::string temp_root;
  // Once the workers run, a process that fails (other than by exit code 2,
  // bad configuration) is started again, up to this many restarts in all,
  // after restart_backoff, doubled at each restart of the same process (at
  // most kMaxRestartBackoff). 0: the first failure ends the job.
  int max_restarts = 0;
  absl::Duration restart_backoff = absl::Seconds(1);
  // Servers are restarted too (they must restore from checkpoints, or a
  // restarted one would hold no model).
  bool restart_servers = false;
};

inline constexpr absl::Duration kMaxRestartBackoff = absl::Seconds(30);

// One restart the launcher made.
struct RestartRecord {
  std::string name;    // "worker 1".
  std::string reason;  // "killed by signal 9 (SIGKILL)", with its last line.
  absl::Duration at;   // Since the run started.
  absl::Duration delay;
};

// How one process of the cluster ended.
struct ProcessOutcome {
  std::string name;                // "server 0", "worker 1".
  std::optional<ExitStatus> exit;  // nullopt: never started.
  // The launcher stopped it (it was still running when the run ended).
  bool stopped_by_launcher = false;
  // A worker that failed (killed, say) after its done line: counted as
  // finished, not as a failure.
  bool finished_before_exit = false;
};

struct ClusterResult {
  // OK when every worker exited 0 (and no server failed). Otherwise names the
  // first process that failed and how: "worker 1 exited with code 3: <its
  // last line>"; Cancelled when stopped by a signal.
  absl::Status status;
  // The signal (SIGINT, SIGTERM) that stopped the run, 0 if none.
  int stop_signal = 0;
  // The failure was a process that exited with kExitBadConfig: the flags
  // must change, and resuming the run as it is would fail the same way.
  bool bad_configuration = false;
  std::vector<ProcessOutcome> processes;
  // Parsed from worker 0's "final test accuracy: 0.8912" line.
  std::optional<double> final_test_accuracy;
  absl::Duration elapsed;
  // Things worth telling that are not failures.
  std::vector<std::string> notes;
  // Every restart, in order.
  std::vector<RestartRecord> restarts;
  int max_restarts = 0;

  // 0 on success, 128 + signal when stopped by one, 2 for bad
  // configuration, 1 otherwise (common/exit_codes.h).
  int ExitCode() const;
};

// Runs one training job as local processes: starts the servers, waits for
// their port files, starts the workers with the server list, hands every
// line of every child to `out`, restarts processes that fail while the
// workers run (ClusterSpec::max_restarts) except a worker that fails after
// its done line ("trained N steps", printed once the servers acknowledged
// its Done), which counts as finished, and stops everything when the
// workers are done, when a failure is final, or on RequestStop.
//
// Thread-safety: Run() is called once, from one thread; RequestStop() may be
// called from any thread at any time (e.g. a signal-handling thread). Owns
// the child processes: none outlives Run(). `out` is not owned and must
// outlive the cluster.
class LocalCluster {
 public:
  LocalCluster(ClusterSpec spec, ClusterOutput* out);
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  ClusterResult Run();

  // Forwards `signal` to every child, then kills what is left after
  // kill_grace; a second request kills at once.
  void RequestStop(int signal);
  // Ends the run as failed because of something outside it (another
  // host's failure): `reason` is the result's status message unless a
  // process of this cluster failed first. The processes are stopped as
  // after a failure.
  void Abort(std::string reason);

 private:
  struct Child {
    ProcessId id;
    std::unique_ptr<Subprocess> process;
    int generation = 0;  // Starts so far, minus one.
    // The current process exited and that was handled (not a failure, or
    // one that a restart will mend).
    bool exited = false;
    std::optional<absl::Time> restart_at;  // A restart is due then.
    std::string restart_reason;            // How it failed, for the due one.
    int port = 0;                          // Servers, once known.
    bool stopped_by_launcher = false;
    // A worker whose process failed after its done line.
    bool finished_before_exit = false;
  };
  // Decides which exits are failures.
  enum class Phase { kStartup, kTraining, kShutdown };

  absl::Status StartChild(size_t slot);
  // The servers' part, in local_cluster_servers.cc.
  absl::Status StartServers(std::vector<std::string>* addresses);
  absl::Status StartWorkers();
  absl::Status AwaitWorkers();
  absl::Status AwaitServerExit(std::vector<std::string>* notes);
  void StopAll();

  // Handles exits not seen yet: schedules restarts, and returns the failure
  // that ends the run (the first, ever after) or a requested stop.
  absl::Status HandleExits(Phase phase);
  // Starts the processes whose restart is due; sets `*next` to the earliest
  // one still to come (InfiniteFuture if none).
  absl::Status StartDueRestarts(absl::Time* next);
  bool AllExited(bool servers) const;
  // This host runs servers and every one has exited (none to restart).
  bool ServersGone() const;
  int64_t Events();
  // Blocks until the event count moves past `seen` or `deadline`.
  void AwaitEvent(int64_t seen, absl::Time deadline);
  void Log(LaunchLevel level, absl::string_view message);
  void OnExit(int child, int generation, const std::string& name,
              const ExitStatus& status);
  void OnLine(const ProcessId& who, absl::string_view line);

  const ClusterSpec spec_;
  ClusterOutput* const out_;
  const absl::Time start_ = absl::Now();
  // Only the thread in Run() touches these (callbacks get copies of what
  // they need).
  std::vector<Child> children_;
  std::string work_dir_;
  std::vector<std::string> addresses_;
  size_t exits_handled_ = 0;
  absl::Status failure_;
  bool failure_is_bad_configuration_ = false;
  std::vector<RestartRecord> restarts_;

  absl::Mutex mu_;
  // Counts child exits and stop requests; waiters wake when it moves.
  int64_t events_ ABSL_GUARDED_BY(mu_) = 0;
  // (child, generation) in the order they exited.
  std::vector<std::pair<int, int>> exits_ ABSL_GUARDED_BY(mu_);
  int stop_signal_ ABSL_GUARDED_BY(mu_) = 0;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  bool kill_now_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<double> final_test_accuracy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_LOCAL_CLUSTER_H_
