#ifndef PS_WORKER_WORKER_CONFIG_H_
#define PS_WORKER_WORKER_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/parameter_client.h"
#include "update/optimizer.h"

namespace ps::worker {

// A worker's settings: one field per flag of the worker binary, of the same
// name, type and default (worker_main.cc documents each). Main fills it from
// the flags; WorkerRun and the checks below take it as a value.
struct WorkerConfig {
  int rank = 0;
  // Rank among this host's workers, which picks the GPU of --device=cuda or
  // auto (kernels::LocalCudaOrdinal); -1: as ResolveRank finds it.
  int local_rank = -1;
  bool rank0_elsewhere = false;
  int num_workers = 1;
  std::string job_id;
  std::string servers;
  std::string server_pattern;
  int num_servers = 0;
  std::string model = "784-256-128-10";
  int batch_size = 64;
  int epochs = 10;
  uint64_t max_steps = 0;
  uint64_t seed = 1;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string device = "auto";
  // A consistency mode the servers must run, or "allreduce" (kAllreduceMode):
  // no servers, the workers average gradients among themselves.
  std::string mode;
  std::string save_model;
  int log_every = 100;
  int eval_every = 0;
  int slowdown_ms = 0;
  int chunk_kb = 1024;
  absl::Duration retry_timeout = absl::Seconds(120);
  bool local_transport = true;
  std::string compression = "none";
  double topk_ratio = 0.01;
  absl::Duration heartbeat_period = absl::Seconds(1);
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_server_name;
  std::string token_file;
  bool local = false;
  std::string optimizer =
      std::string(OptimizerKindName(update::OptimizerConfig().kind));
  float learning_rate = update::OptimizerConfig().learning_rate;
  float momentum = update::OptimizerConfig().momentum;
  float weight_decay = update::OptimizerConfig().weight_decay;
  float beta1 = update::OptimizerConfig().beta1;
  float beta2 = update::OptimizerConfig().beta2;
  float epsilon = update::OptimizerConfig().epsilon;
  std::string lr_schedule = "constant";
  float min_learning_rate = 0.0f;
  std::string cpus;
  int metrics_port = 0;
  std::string metrics_host = "127.0.0.1";
  int allreduce_bucket_kb = 25600;
  std::string allreduce_host;
  std::string allreduce_backend = "auto";
  std::string allreduce_compression = "none";
  std::string checkpoint_dir;
  int64_t checkpoint_every_steps = 200;
  // Pipeline parallelism (worker/pipeline/stage_run.h checks them).
  int pipeline_stages = 1;
  int micro_batches = 1;
  std::string pipeline_schedule = "gpipe";  // gpipe | 1f1b.
  std::string stage_split = "compute";      // compute | bytes.
  // Bytes with an optional K, M or G; "0": none (memory_budget.h).
  std::string worker_memory_budget = "0";
  // Fault tests only: rank=R,at=...,once=PATH (worker/kill_point.h).
  std::string test_kill_self;
  // A neighbouring stage on another host (worker/pipeline/link_routes.h);
  // the secret comes from $PS_STAGE_LINK_SECRET, never from a flag.
  std::string stage_link_listen;
  std::string stage_link_previous;
  std::string stage_link_secret;
};

// --mode's value for the all-reduce mode: --servers then names the ring's
// coordinator (allreduce/coordinator_main.cc), and the optimizer flags are
// this worker's own, as with --local.
inline constexpr char kAllreduceMode[] = "allreduce";

// Where a worker stands among the others.
struct RankAndCount {
  int rank = 0;
  int num_workers = 1;
  int local_rank = 0;  // Among the workers of this host.
};

// The rank and number of workers the flags say: --rank and --num_workers,
// or with --rank=-1 from the environment (`lookup`: std::getenv in main):
// - a task that srun or mpirun started: the scheduler's rank and task count
//   (common/launch_environment.h), one worker per task; --num_workers, where
//   given (`num_workers_given`: main tells a value other than the flag's
//   default), must equal the task count;
// - a pod of a Kubernetes Indexed Job: $JOB_COMPLETION_INDEX, and
//   --num_workers.
// The local rank is --local_rank where given (>= 0); else the scheduler's
// local rank, 0 in a pod (one worker each), or the rank itself when --rank
// is given (workers started by hand spread over a host's GPUs by rank).
// InvalidArgument for --local_rank below -1, and, naming the flags and
// variables at fault, for a scheduler's variables half set or contradictory, a
// task count unlike
// --num_workers, $JOB_COMPLETION_INDEX beside a scheduler's variables, or
// none of them set.
absl::StatusOr<RankAndCount> ResolveRank(
    const WorkerConfig& config, bool num_workers_given,
    absl::FunctionRef<const char*(const char*)> lookup);

// The servers' addresses: --servers, or --server_pattern expanded for
// --num_servers. InvalidArgument unless exactly one is given.
absl::StatusOr<std::vector<std::string>> ResolveServers(
    const WorkerConfig& config);

// --compression (none, bf16, fp16, topk) with --topk_ratio, as the client
// library takes it; InvalidArgument naming the flag.
absl::StatusOr<Compression> CompressionFromConfig(const WorkerConfig& config);

// Checks every value for the worker of `rank`, naming the flag at fault
// (InvalidArgument); reads the authentication files so that an error names
// the flag.
absl::Status CheckWorkerConfig(const WorkerConfig& config, int rank);

}  // namespace ps::worker

#endif  // PS_WORKER_WORKER_CONFIG_H_
