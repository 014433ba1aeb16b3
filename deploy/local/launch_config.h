#ifndef PS_DEPLOY_LOCAL_LAUNCH_CONFIG_H_
#define PS_DEPLOY_LOCAL_LAUNCH_CONFIG_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "deploy/local/generated_auth.h"
#include "deploy/local/local_cluster.h"
#include "deploy/local/stage_links.h"

namespace ps {

// Everything the launcher's flags say, before it starts anything. Defaults
// are the README's main job.
struct LaunchConfig {
  int num_servers = 2;
  int num_workers = 2;
  // Training flags forwarded to the servers and/or workers.
  std::string model = "784-256-128-10";
  int epochs = 10;
  int batch_size = 64;
  std::string mode = "sync";
  int staleness = 0;
  // adam or sgd; empty: not forwarded, so that the servers take what the
  // program declares (paramserver.torch declares the optimizer it wraps),
  // else their own default.
  std::string optimizer;
  double learning_rate = 0;  // 0: not forwarded (the server's default).
  // constant or cosine (decays over the planned steps); the server's default.
  std::string lr_schedule = "constant";
  // Empty: no checkpoints. Else servers checkpoint there and restore from
  // it when restarted.
  std::string checkpoint_dir;
  // The run's directory: each server writes its exit report to
  // ServerReportFile(run_dir, index) (deploy/local/run_directory.h).
  // Empty: no reports.
  std::string run_dir;
  // The run is being extended (launch --extend), or was: servers restore
  // with --extend, taking a finished run's checkpoint and the workers' new
  // plan.
  bool extend = false;
  int64_t seed = 1;
  // Given to servers and workers (--job_id, $PS_JOB_ID), so that servers of
  // another job refuse them; empty: none. The launcher makes one per run.
  std::string job_id;
  // TLS, mutual TLS and the job token (deploy/local/generated_auth.h):
  // given to the servers (--tls_cert, --tls_key, --tls_client_ca,
  // --token_file) and workers (--tls_ca, --tls_cert, --tls_key,
  // --token_file; $PS_TLS_CA, ... for a program). Empty: plaintext.
  AuthFiles auth;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string device = "auto";
  // Empty: not forwarded. Given to worker 0 only (with server groups,
  // to replica 0's stages: pipeline_mode.h SavesModel).
  std::string save_model;
  // Our worker's --log_every, --eval_every, --max_steps, --retry_timeout;
  // forwarded only when they differ from the worker's defaults (these).
  int log_every = 100;
  int eval_every = 0;
  int64_t max_steps = 0;
  absl::Duration retry_timeout = absl::Seconds(120);
  // 0: no metrics. Else server i serves Prometheus metrics on
  // metrics_port_base + i, worker j on metrics_port_base + S + j, S the
  // servers in all (TotalServers, pipeline_mode.h) (their --metrics_port);
  // a program's workers are not given one.
  int metrics_port_base = 0;
  // More flags for every server / worker, e.g. "--momentum=0.5".
  // Pipeline parallelism (deploy/local/pipeline_mode.h): workers are
  // replicas x pipeline_stages; each step's batch in micro_batches.
  int pipeline_stages = 1;
  int micro_batches = 1;
  std::string pipeline_schedule = "gpipe";  // Our worker's flags.
  std::string stage_split = "compute";
  // Our workers' --worker_memory_budget; "0": none (not forwarded).
  std::string worker_memory_budget = "0";
  std::vector<std::string> extra_server_flags;
  std::vector<std::string> extra_worker_flags;

  std::string server_binary;
  std::string worker_binary;
  // Empty: workers run worker_binary with the flags above. Else the argv of
  // the program each worker runs instead, which learns its rank and the
  // servers from its environment (common/worker_environment.h); the servers
  // are stopped once every copy has exited 0.
  std::vector<std::string> program;
  // 0: a program's workers find OMP_NUM_THREADS as the launcher's own
  // environment has it. Else it is set to this for each of them: the
  // threads of PyTorch's, NumPy's and OpenBLAS's math, which by default
  // start (and spin) one per core in every worker (torchrun sets 1).
  int program_threads = 0;
  // This host's part of a job on several hosts (multi_host_launch.h):
  // server shards [first_server, first_server + host_servers) and ranks
  // [first_rank, first_rank + host_workers); -1: all of the job's. Its
  // servers listen on, and are reached at, server_host.
  int first_server = 0;
  int host_servers = -1;
  int first_rank = 0;
  int host_workers = -1;
  std::string server_host = "127.0.0.1";
  // A pipelined job of our worker whose stages' links cross hosts: this
  // host's workers' --stage_link_listen and --stage_link_previous, and the
  // job's link secret, given in $PS_STAGE_LINK_SECRET (stage_links.h).
  StageLinkPlan stage_links;
  // 0: each server picks a free port; else server i listens on base_port + i.
  int base_port = 0;
  absl::Duration startup_timeout = absl::Seconds(60);
  absl::Duration shutdown_timeout = absl::Seconds(30);
  absl::Duration kill_grace = absl::Seconds(5);
  // See ClusterSpec: restarts of failed processes (servers only with
  // checkpoint_dir), the first after restart_backoff.
  int max_restarts = 3;
  absl::Duration restart_backoff = absl::Seconds(1);
};

// Examples in Fashion-MNIST's training set, which our worker's data shards
// split.
inline constexpr int kTrainingExamples = 60000;

// Checks every value and names the flag at fault, e.g.
// "--num_workers must be in [1, 256], got 0". Touches no file.
absl::Status ValidateLaunchConfig(const LaunchConfig& config);

// What is legal but probably not meant, e.g. a batch larger than a worker's
// share of the data; one sentence each.
std::vector<std::string> LaunchConfigWarnings(const LaunchConfig& config);

// Where server `index` / worker `rank` serves its metrics; 0 when off.
int ServerMetricsPort(const LaunchConfig& config, int index);
int WorkerMetricsPort(const LaunchConfig& config, int rank);
// Says where the metrics are, e.g. "metrics at
// http://127.0.0.1:PORT/metrics: servers on 9100-9101, workers on 9102-9103".
std::string MetricsPortsLine(const LaunchConfig& config);

// Splits "--a=1 --b=2" into flags; each must look like --name[=value] and
// must not set one the launcher sets itself (`reserved`, names without "--").
// `flag_name` names the launcher flag in errors.
absl::StatusOr<std::vector<std::string>> ParseExtraFlags(
    absl::string_view flag_name, absl::string_view text,
    const std::vector<std::string>& reserved);
// The flags the launcher sets on servers / workers itself; with `auth`,
// also the authentication flags.
std::vector<std::string> ReservedServerFlags(bool auth = false);
std::vector<std::string> ReservedWorkerFlags(bool auth = false);

// `port` 0: base_port + index, or a free one without base_port.
std::vector<std::string> ServerArgv(const LaunchConfig& config, int index,
                                    const std::string& port_file, int port = 0);
std::vector<std::string> WorkerArgv(const LaunchConfig& config, int rank,
                                    const std::vector<std::string>& servers);
// What a worker program (config.program) is told: its local rank among
// this host's workers.
std::vector<std::pair<std::string, std::string>> WorkerEnv(
    const LaunchConfig& config, int rank,
    const std::vector<std::string>& servers);

// The cluster that runs `config` (validated): this host's share of it, its
// servers on server_host.
ClusterSpec MakeClusterSpec(const LaunchConfig& config);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_LAUNCH_CONFIG_H_
