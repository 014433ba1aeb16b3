#ifndef PS_TESTS_HOSTS_HOST_JOB_H_
#define PS_TESTS_HOSTS_HOST_JOB_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "tests/hosts/test_hosts.h"
#include "update/checkpoint.h"

namespace ps::testing {

class MetricPeaks;

// A job of the real server binary and of workers (the worker binary, or a
// program on the client library) placed on test hosts, for tests of what
// the network does to a job: they start it, cut or slow its links, and
// check what it left through its contracts (exit codes, files, metrics),
// never through its log lines.
//
// Each server listens on its host's address, writes its checkpoints (the
// final one as it exits) to a directory of its own, and serves its metrics
// on its host's loopback at kServerMetricsPort; worker `rank` serves its
// metrics at kWorkerMetricsPort + rank (each host is a network namespace of
// its own, so the ports are free). Every process's lines go to the test log
// prefixed with its name.
//
// Thread-safety: not thread-safe. Borrows `hosts`, which must outlive it;
// its destructor stops whatever still runs.
class HostJob {
 public:
  static constexpr int kServerMetricsPort = 9400;
  static constexpr int kWorkerMetricsPort = 9500;

  // Starts shard i on host `server_hosts[i]` for `num_workers` workers, each
  // with `server_flags` added to those above, and waits until every shard
  // listens (for at most `timeout`).
  static absl::StatusOr<std::unique_ptr<HostJob>> Start(
      const TestHosts* hosts, std::vector<int> server_hosts, int num_workers,
      std::vector<std::string> server_flags, absl::Duration timeout);

  ~HostJob();
  HostJob(const HostJob&) = delete;
  HostJob& operator=(const HostJob&) = delete;

  // "ADDRESS:PORT" of every shard, shard 0 first.
  const std::vector<std::string>& servers() const { return servers_; }
  int num_servers() const { return static_cast<int>(servers_.size()); }
  // The host each shard runs on.
  int server_host(int index) const { return server_hosts_.at(index); }
  Subprocess& server(int index) { return *server_processes_.at(index); }

  // Starts the worker binary as `rank` on `host`, with `worker_flags` added
  // to its rank, the number of workers, the servers and its metrics port.
  absl::Status StartWorker(int rank, int host,
                           std::vector<std::string> worker_flags);
  // Starts `argv`, a program on the client library, as `rank` on `host`,
  // with the launcher's environment (PS_SERVERS, PS_RANK, PS_NUM_WORKERS).
  absl::Status StartProgram(int rank, int host, std::vector<std::string> argv);
  // Null if rank `rank` was not started.
  Subprocess* worker(int rank);

  // Waits for every worker, then every shard, to exit (for at most
  // `timeout` in all): OK if each exited 0; else an error naming the first
  // that did not (or still runs), how it ended and its last lines.
  absl::Status Wait(absl::Duration timeout);

  // The text of shard `index`'s /metrics, read on its host (whether or not
  // the host's link is up).
  absl::StatusOr<std::string> ServerMetrics(int index) const;
  // The value of the sample of `name` with `labels` (MetricValue) there;
  // NotFound while there is none.
  absl::StatusOr<double> ServerMetric(
      int index, absl::string_view name,
      const std::vector<std::pair<std::string, std::string>>& labels = {})
      const;
  // Reads every shard's metrics, over and over, until every worker started
  // has exited, and folds each text read into `peaks` (a shard not serving,
  // yet or any more, is passed over). DeadlineExceeded, naming a worker, if
  // one still runs after `timeout`.
  absl::Status WatchServersWhileWorkersRun(MetricPeaks* peaks,
                                           absl::Duration timeout);
  // The newest checkpoint shard `index` wrote (after it exited: its final
  // one).
  absl::StatusOr<update::ShardCheckpoint> LastCheckpoint(int index) const;

 private:
  HostJob(const TestHosts* hosts, std::vector<int> server_hosts,
          int num_workers, std::string dir);

  absl::Status StartServer(int index, std::vector<std::string> flags,
                           absl::Duration timeout);
  absl::Status StartOn(int rank, int host, SubprocessOptions options);
  std::string CheckpointDir(int index) const;

  const TestHosts* const hosts_;
  const std::vector<int> server_hosts_;
  const int num_workers_;
  // This job's files, under the test's temporary directory.
  const std::string dir_;
  std::vector<std::string> servers_;
  std::vector<std::unique_ptr<Subprocess>> server_processes_;
  std::vector<std::unique_ptr<Subprocess>> workers_;  // By rank.
};

// The value of the sample of `name` in the Prometheus text `text` whose
// labels include each of `labels` (name, value), e.g.
// MetricValue(text, "ps_server_version") or
// MetricValue(text, "ps_server_rank_dead", {{"rank", "1"}}); nullopt if
// there is none.
std::optional<double> MetricValue(
    absl::string_view text, absl::string_view name,
    const std::vector<std::pair<std::string, std::string>>& labels = {});

// The largest value of each of some metrics (samples without labels) that
// each shard exported, over the metrics texts folded in: what a job did
// while it ran, for counters read by scraping (HostJob::
// WatchServersWhileWorkersRun).
//
// Thread-safety: not thread-safe.
class MetricPeaks {
 public:
  explicit MetricPeaks(std::vector<std::string> names);

  // Folds in a metrics text of shard `index`.
  void Add(int index, absl::string_view text);
  // The largest value of `name` in a text of shard `index` folded in;
  // nullopt if none had a sample of it (e.g. the shard was never read) or
  // `name` is not one followed.
  std::optional<double> Peak(absl::string_view name, int index) const;

 private:
  const std::vector<std::string> names_;
  std::map<std::pair<std::string, int>, double> peaks_;  // By (name, shard).
};

// Polls `read` (e.g. a metric of a job) until `holds` says yes of what it
// returned, for at most `timeout`: OK then, else DeadlineExceeded saying
// `what` and the last value or error read.
absl::Status AwaitValue(absl::string_view what,
                        const std::function<absl::StatusOr<double>()>& read,
                        const std::function<bool(double)>& holds,
                        absl::Duration timeout);

// The share of the Fashion-MNIST test split that the model in `model_file`
// (the worker's --save_model) of `model_flag` (its --model) classifies
// correctly.
absl::StatusOr<double> TestAccuracy(const std::string& model_file,
                                    const std::string& model_flag);

// Whether shard checkpoints `a` and `b` hold the same weights and
// optimizer state, bit for bit: "" if so, else the first difference.
std::string CompareWeights(const update::ShardCheckpoint& a,
                           const update::ShardCheckpoint& b);

}  // namespace ps::testing

#endif  // PS_TESTS_HOSTS_HOST_JOB_H_
