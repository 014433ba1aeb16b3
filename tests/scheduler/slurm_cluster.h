#ifndef PS_TESTS_SCHEDULER_SLURM_CLUSTER_H_
#define PS_TESTS_SCHEDULER_SLURM_CLUSTER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/subprocess.h"

namespace ps::testing {

// Debian's real Slurm (slurm-wlm) on this machine, for one test: a munge
// daemon with a key of its own, slurmctld and slurmd in the foreground (-D)
// as this process's children, and a generated slurm.conf whose one node is
// this machine (its hostname at 127.0.0.1) with `cpus` CPUs in one
// partition, oversubscribed, so that several tasks run on two cores.
// Everything lives in a fresh directory under /tmp (short: Unix socket
// paths have a limit that $TEST_TMPDIR may pass): the key, the sockets, the
// state and spool directories, the logs. The ports are free ones picked at
// start.
//
// Start() returns once `sinfo` shows the node idle. The destructor cancels
// every job of the cluster, stops the daemons, kills whatever the cluster
// started that still runs (slurmstepd leaves the daemons' process group:
// each process the cluster or its commands start carries a marker variable,
// which is how they are found), and removes the directory, also when a test
// fails.
//
// Needs root (slurmd runs tasks as their user, and munge's key must belong
// to its daemon) and Debian's slurm-wlm and munge; WhyUnavailable() says
// whether they are there.
//
// Thread-safety: const after Start(); every method may be called from any
// thread.
class SlurmCluster {
 public:
  // "" where a cluster can be started here; else why not, for a test's skip
  // message.
  static std::string WhyUnavailable();

  // Starts munged, slurmctld and slurmd and waits (up to `timeout`) until
  // the node is idle; a daemon that exits first is tried again with other
  // ports, twice. On error whatever was started is stopped again, and the
  // message quotes the daemons' last lines.
  static absl::StatusOr<std::unique_ptr<SlurmCluster>> Start(
      int cpus = 8, absl::Duration timeout = absl::Seconds(120));

  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // The node's name, as SLURM_STEP_NODELIST names it.
  const std::string& node_name() const { return node_name_; }

  // The variables that point Slurm's commands (srun, sbatch, squeue, ...)
  // at this cluster, and the marker: for a command's environment.
  std::vector<std::pair<std::string, std::string>> ClientEnvironment() const;

  // A Slurm command's full path ("srun": /usr/bin/srun).
  static std::string Command(const std::string& name);

  // How a test starts `srun -n NUM_TASKS ARGV...` against this cluster:
  // TestProcessOptions (tests/cluster_runner.h) with ClientEnvironment().
  SubprocessOptions SrunOptions(const std::string& name, int num_tasks,
                                std::vector<std::string> argv) const;

  // Runs a Slurm command (argv[0] as for Command()) against this cluster to
  // its end: its output, or an error naming it, how it ended and its last
  // lines when it fails or outlives `timeout`.
  absl::StatusOr<std::string> Run(std::vector<std::string> argv,
                                  absl::Duration timeout) const;

 private:
  explicit SlurmCluster(std::string dir);

  // Writes the key and slurm.conf, starts the daemons, waits for the node.
  absl::Status StartDaemons(int cpus, absl::Duration timeout);
  absl::Status WaitForNodeIdle(absl::Time deadline) const;
  // The daemons' last lines, for an error.
  std::string DaemonLines() const;
  // Cancels the jobs and waits (bounded) until none runs; errors logged.
  void CancelJobs() const;
  // SIGKILLs every process that carries the marker.
  void KillMarked() const;

  const std::string dir_;  // Removed by the destructor.
  std::string node_name_;
  std::unique_ptr<Subprocess> munged_;
  std::unique_ptr<Subprocess> slurmctld_;
  std::unique_ptr<Subprocess> slurmd_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_SCHEDULER_SLURM_CLUSTER_H_
