#ifndef PS_TESTS_PROCESS_CLUSTER_H_
#define PS_TESTS_PROCESS_CLUSTER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "deploy/local/launch_config.h"
#include "server/shard_report.h"

namespace ps::testing {

// A cluster of real server and worker processes on 127.0.0.1 that a test
// drives one process at a time: start, kill, restart. Command lines come
// from the launcher's own builders, so tests run what users run. Every
// process is killed when the cluster is destroyed.
//
// Not thread-safe; one test thread drives it.
class ProcessCluster {
 public:
  explicit ProcessCluster(LaunchConfig config);
  ~ProcessCluster();

  // Starts server `index` and waits until it listens. A server that ran
  // before is restarted on the port it had, so workers find it again.
  absl::Status StartServer(int index,
                           const std::vector<std::string>& extra_flags = {});
  absl::Status StartAllServers();
  absl::Status StartWorker(int rank,
                           const std::vector<std::string>& extra_flags = {});
  absl::Status StartAllWorkers();

  // SIGKILL, then reap.
  void KillServer(int index);
  void KillWorker(int rank);

  // Waits for a process to exit; nullopt on timeout.
  std::optional<ExitStatus> WaitWorker(int rank, absl::Duration timeout);
  std::optional<ExitStatus> WaitServer(int index, absl::Duration timeout);

  // Waits until the process prints a line containing `text`.
  absl::StatusOr<std::string> AwaitWorkerLine(int rank, absl::string_view text,
                                              absl::Duration timeout);
  absl::StatusOr<std::string> AwaitServerLine(int index, absl::string_view text,
                                              absl::Duration timeout);

  // Every line printed so far by the current process of that slot.
  std::vector<std::string> ServerLines(int index) const;
  std::vector<std::string> WorkerLines(int rank) const;
  // The report server `index` wrote at its last exit
  // (server/shard_report.h; the file the launcher names,
  // deploy/local/run_directory.h, in config().run_dir or a directory of the
  // cluster's own). NotFound if none of this cluster's has exited.
  absl::StatusOr<server::ShardReport> ServerReport(int index) const;

  const LaunchConfig& config() const { return config_; }
  // "127.0.0.1:port" of every server that has listened (for clients a test
  // runs itself).
  std::vector<std::string> ServerAddresses() const { return Addresses(); }

 private:
  absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(
      const std::string& name, std::vector<std::string> argv);
  std::vector<std::string> Addresses() const;

  const LaunchConfig config_;
  const std::string work_dir_;
  std::vector<int> ports_;  // 0 until the server first listened.
  std::vector<std::unique_ptr<Subprocess>> servers_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
  int restarts_ = 0;
};

}  // namespace ps::testing

#endif  // PS_TESTS_PROCESS_CLUSTER_H_
