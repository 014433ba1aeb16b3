// The training worker: `worker --rank=0 --num_workers=2 --servers=h:p,h:p`.
//
// Exit codes (also in --help): see kUsage below.

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/stop_signals.h"
#include "spdlog/spdlog.h"
#include "update/optimizer.h"
#include "worker/pipeline/link_routes.h"
#include "worker/worker_config.h"
#include "worker/worker_run.h"

ABSL_FLAG(int, rank, 0,
          "This worker's rank in [0, num_workers); -1 reads it from the "
          "environment: under srun or mpirun the task's rank, and the task "
          "count as --num_workers (one worker per task); else "
          "$JOB_COMPLETION_INDEX (Kubernetes Indexed Job)");
ABSL_FLAG(int, local_rank, -1,
          "This worker's rank among the workers of its host; with "
          "--device=cuda or auto it trains on GPU (local_rank mod the GPUs "
          "found). -1: srun's or mpirun's local rank under --rank=-1, 0 in a "
          "Kubernetes pod, else --rank");
ABSL_FLAG(bool, rank0_elsewhere, false,
          "With --rank=-1: rank 0 runs in a Job of its own (the one pod that "
          "mounts the model store), so the pod of completion index 0 exits 0 "
          "at once");
ABSL_FLAG(int, num_workers, 1, "Number of workers in the job");
ABSL_FLAG(std::string, job_id, "",
          "The job's id, as the servers' --job_id: servers of another job "
          "refuse this worker");
ABSL_FLAG(std::string, servers, "",
          "Comma-separated host:port of every parameter server, in index "
          "order");
ABSL_FLAG(std::string, server_pattern, "",
          "Instead of --servers: an address with {index}, e.g. "
          "ps-server-{index}.ps-server:7000, expanded for --num_servers");
ABSL_FLAG(int, num_servers, 0, "Number of servers (with --server_pattern)");
ABSL_FLAG(std::string, model, "784-256-128-10",
          "The network: MLP layer sizes (784-256-128-10), a preset (mlp, "
          "cnn), a layer stack (\"input 1x28x28; conv 32 3x3 pad 1; relu; "
          "...\") or @file holding one; see worker/nn/model_description.h");
ABSL_FLAG(int, batch_size, 64, "Examples per step on this worker");
ABSL_FLAG(int, epochs, 10, "Passes over the training set");
ABSL_FLAG(uint64_t, max_steps, 0, "Stop after this many steps (0: no limit)");
ABSL_FLAG(uint64_t, seed, 1,
          "Seed of the data shuffle and of the initial weights, which the "
          "servers draw from the declared model's seed (same on every "
          "worker)");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Directory with the Fashion-MNIST IDX files");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda");
ABSL_FLAG(std::string, mode, "",
          "Expected consistency mode (sync, ssp, async); empty accepts the "
          "servers'. allreduce: no servers; the workers average gradients "
          "among themselves over a Gloo ring, each holding the full model and "
          "updating it with the optimizer flags below (as with --local); "
          "--servers then names the ring's coordinator");
ABSL_FLAG(std::string, save_model, "", "Rank 0 writes the final model here");
ABSL_FLAG(int, log_every, 100, "Progress line every this many steps");
ABSL_FLAG(int, eval_every, 0,
          "Rank 0 also measures test accuracy every this many steps (0: only "
          "at each epoch's end)");
ABSL_FLAG(int, slowdown_ms, 0,
          "Sleep this long every step, between its push and its next pull "
          "(to slow one worker on purpose)");
ABSL_FLAG(int, chunk_kb, 1024, "Size of streamed tensor chunks, in KiB");
ABSL_FLAG(absl::Duration, retry_timeout, absl::Seconds(120),
          "How long to wait for servers to come up, and to keep retrying an "
          "unreachable one (e.g. while it restarts), before giving up");
ABSL_FLAG(bool, local_transport, true,
          "Reach servers on this host over the Unix socket they announce "
          "rather than gRPC over TCP (fewer copies and thread hand-offs); "
          "servers on other hosts are reached through gRPC either way");
ABSL_FLAG(std::string, compression, "none",
          "How gradients and weights travel to and from the servers: none "
          "(float32), bf16 or fp16 (both ways, half the bytes; the servers "
          "keep float32), or topk (gradients only: the --topk_ratio largest "
          "of gradient plus what earlier steps did not send). The final "
          "pull, which rank 0 evaluates and saves, is float32.");
ABSL_FLAG(double, topk_ratio, 0.01,
          "With --compression=topk: the fraction of each gradient sent");
ABSL_FLAG(absl::Duration, heartbeat_period, absl::Seconds(1),
          "How often this worker tells every server, between its calls, "
          "that it is alive and which steps it has done (keep it well "
          "below the servers' --worker_timeout)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM certificate of the CA that signed the servers' --tls_cert: "
          "speak TLS and refuse servers it did not sign. Empty: plaintext.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate of this worker, for servers that require one "
          "(--tls_client_ca); with --tls_key. Needs --tls_ca.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "The name every server's certificate must carry (e.g. ps-server); "
          "empty: each server's host as given. Needs --tls_ca.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the job token (the servers' --token_file), sent with "
          "every call. Needs --tls_ca.");
ABSL_FLAG(int, allreduce_bucket_kb, 25600,
          "With --mode=allreduce: gradients are summed in buckets of this "
          "many KiB, each as soon as backward has filled it (the default, "
          "DDP's 25 MiB, makes one bucket of a small model: fewer collectives, "
          "no overlap with backward)");
ABSL_FLAG(std::string, allreduce_host, "",
          "With --mode=allreduce: the address the other workers reach this "
          "one at; empty: this host's name");
ABSL_FLAG(std::string, allreduce_backend, "auto",
          "With --mode=allreduce: gloo (CPU, TCP), nccl (GPUs; needs a CUDA "
          "--device and a build with NCCL) or auto (nccl where both hold, "
          "else gloo)");
ABSL_FLAG(std::string, allreduce_compression, "none",
          "With --mode=allreduce: none, or fp16 (gradient buckets travel as "
          "IEEE half: half the bytes, each sum within a bound of the exact "
          "one; see allreduce/compression.h)");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "With --mode=allreduce: rank 0 writes checkpoints of the model and "
          "optimizer state here (the servers' format), and every rank resumes "
          "from the newest; empty: none");
ABSL_FLAG(int64_t, checkpoint_every_steps, 200,
          "With --checkpoint_dir: a checkpoint every this many steps (0: only "
          "at the end)");
ABSL_FLAG(int, pipeline_stages, 1,
          "Split --model's layers into this many stages (--stage_split), "
          "each a worker: --num_workers is replicas x "
          "stages, and rank r runs stage r mod stages of replica r / stages. "
          "Activations and their gradients go between a replica's stages "
          "directly (this host's socket, or TCP to another host: "
          "--stage_link_listen); each stage's parameters live on a "
          "server group of their own (--servers lists every group's, in "
          "stage order; --job_id is the run's, a group's is "
          "<job_id>-stage<s>)");
ABSL_FLAG(int, micro_batches, 1,
          "With --pipeline_stages: each step's batch is cut into this many "
          "micro-batches, which must divide --batch_size");
ABSL_FLAG(std::string, pipeline_schedule, "gpipe",
          "With --pipeline_stages: gpipe (every micro-batch forward, then "
          "every one backward) or 1f1b (stage s of K keeps at most K - s "
          "micro-batches in flight); both give the same gradients");
ABSL_FLAG(std::string, stage_split, "compute",
          "With --pipeline_stages: balance the stages by forward and "
          "backward FLOPs (compute) or by parameter bytes (bytes)");
ABSL_FLAG(std::string, stage_link_listen, "",
          "With --pipeline_stages, when the next stage runs on another host: "
          "HOST:PORT to listen at for it (frames over TCP, admitted by the "
          "job's secret in $PS_STAGE_LINK_SECRET; not with TLS); empty: "
          "this host's socket");
ABSL_FLAG(std::string, stage_link_previous, "",
          "With --pipeline_stages, when the previous stage runs on another "
          "host: HOST:PORT at which it listens (its --stage_link_listen); "
          "empty: this host's socket");
ABSL_FLAG(std::string, worker_memory_budget, "0",
          "Cap on a worker's tensor memory, in bytes with an optional K, M or "
          "G (0: none): a job whose workers would need more is refused "
          "before training, naming the smallest --pipeline_stages that fits "
          "(worker/pipeline/memory_budget.h)");
ABSL_FLAG(
    std::string, test_kill_self, "",
    "For fault tests: rank=R,at=step:N|push:N|upload|done[,once=PATH] makes "
    "the worker of rank R kill itself with SIGKILL at that moment "
    "(once: only if PATH does not exist, which it creates); see "
    "worker/kill_point.h. Empty: never");
ABSL_FLAG(bool, local, false,
          "Train in this process alone, without servers (one worker): the "
          "weights are initialised and updated by the servers' own code with "
          "the optimizer flags below, as one sync server would; the baseline "
          "training through servers is measured against");
ABSL_FLAG(
    std::string, optimizer,
    std::string(ps::OptimizerKindName(ps::update::OptimizerConfig().kind)),
    "With --local or --mode=allreduce: adam or sgd, as the servers' flag");
ABSL_FLAG(float, learning_rate, ps::update::OptimizerConfig().learning_rate,
          "With --local or --mode=allreduce: as the servers' flag");
ABSL_FLAG(float, momentum, ps::update::OptimizerConfig().momentum,
          "With --local or --mode=allreduce: as the servers' flag");
ABSL_FLAG(float, weight_decay, ps::update::OptimizerConfig().weight_decay,
          "With --local or --mode=allreduce: as the servers' flag");
ABSL_FLAG(float, beta1, ps::update::OptimizerConfig().beta1,
          "With --local or --mode=allreduce: as the servers' flag");
ABSL_FLAG(float, beta2, ps::update::OptimizerConfig().beta2,
          "With --local or --mode=allreduce: as the servers' flag");
ABSL_FLAG(float, epsilon, ps::update::OptimizerConfig().epsilon,
          "With --local or --mode=allreduce: as the servers' flag");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "With --local or --mode=allreduce: constant or cosine, as the "
          "servers' flag");
ABSL_FLAG(float, min_learning_rate, 0.0f,
          "With --local or --mode=allreduce: as the servers' flag");
ABSL_FLAG(std::string, cpus, "",
          "CPUs this worker may run on, in the kernel's list format "
          "(\"0-3,8\"); empty: any. On a host shared with servers, separate "
          "cores for workers and servers keep the scheduler from moving them "
          "onto each other's.");
ABSL_FLAG(int, metrics_port, 0,
          "If not 0, serve Prometheus metrics (steps, step time by phase, "
          "examples/s, loss) at http://<--metrics_host>:<port>/metrics.");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "IPv4 address the metrics endpoint listens on; 0.0.0.0 for every "
          "interface (a Kubernetes pod scraped from outside).");

namespace ps::worker {
namespace {

constexpr char kUsage[] =
    "Trains its shard of Fashion-MNIST against the parameter servers.\n"
    "Exit codes: 0 trained to the end; 1 training failed (the log says why; "
    "worth a retry); 2 bad configuration: flags, data, model, a --save_model "
    "directory it cannot write, or a mode or worker count the servers do not "
    "share (never retry); 3 lost the servers: one stayed unreachable past "
    "--retry_timeout (retry once they are back); 143 stopped by SIGTERM or "
    "SIGINT (the current step is abandoned; the servers let a restarted "
    "worker of the same rank resume).";

// The flags, as a value.
WorkerConfig ConfigFromFlags() {
  WorkerConfig config;
  config.rank = absl::GetFlag(FLAGS_rank);
  config.local_rank = absl::GetFlag(FLAGS_local_rank);
  config.rank0_elsewhere = absl::GetFlag(FLAGS_rank0_elsewhere);
  config.num_workers = absl::GetFlag(FLAGS_num_workers);
  config.job_id = absl::GetFlag(FLAGS_job_id);
  config.servers = absl::GetFlag(FLAGS_servers);
  config.server_pattern = absl::GetFlag(FLAGS_server_pattern);
  config.num_servers = absl::GetFlag(FLAGS_num_servers);
  config.model = absl::GetFlag(FLAGS_model);
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.epochs = absl::GetFlag(FLAGS_epochs);
  config.max_steps = absl::GetFlag(FLAGS_max_steps);
  config.seed = absl::GetFlag(FLAGS_seed);
  config.data_dir = absl::GetFlag(FLAGS_data_dir);
  config.device = absl::GetFlag(FLAGS_device);
  config.mode = absl::GetFlag(FLAGS_mode);
  config.save_model = absl::GetFlag(FLAGS_save_model);
  config.log_every = absl::GetFlag(FLAGS_log_every);
  config.eval_every = absl::GetFlag(FLAGS_eval_every);
  config.slowdown_ms = absl::GetFlag(FLAGS_slowdown_ms);
  config.chunk_kb = absl::GetFlag(FLAGS_chunk_kb);
  config.retry_timeout = absl::GetFlag(FLAGS_retry_timeout);
  config.local_transport = absl::GetFlag(FLAGS_local_transport);
  config.compression = absl::GetFlag(FLAGS_compression);
  config.topk_ratio = absl::GetFlag(FLAGS_topk_ratio);
  config.heartbeat_period = absl::GetFlag(FLAGS_heartbeat_period);
  config.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  config.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  config.tls_key = absl::GetFlag(FLAGS_tls_key);
  config.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  config.token_file = absl::GetFlag(FLAGS_token_file);
  config.local = absl::GetFlag(FLAGS_local);
  config.optimizer = absl::GetFlag(FLAGS_optimizer);
  config.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  config.momentum = absl::GetFlag(FLAGS_momentum);
  config.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  config.beta1 = absl::GetFlag(FLAGS_beta1);
  config.beta2 = absl::GetFlag(FLAGS_beta2);
  config.epsilon = absl::GetFlag(FLAGS_epsilon);
  config.lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  config.min_learning_rate = absl::GetFlag(FLAGS_min_learning_rate);
  config.cpus = absl::GetFlag(FLAGS_cpus);
  config.allreduce_bucket_kb = absl::GetFlag(FLAGS_allreduce_bucket_kb);
  config.allreduce_host = absl::GetFlag(FLAGS_allreduce_host);
  config.allreduce_backend = absl::GetFlag(FLAGS_allreduce_backend);
  config.allreduce_compression = absl::GetFlag(FLAGS_allreduce_compression);
  config.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  config.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  config.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  config.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  config.pipeline_stages = absl::GetFlag(FLAGS_pipeline_stages);
  config.micro_batches = absl::GetFlag(FLAGS_micro_batches);
  config.pipeline_schedule = absl::GetFlag(FLAGS_pipeline_schedule);
  config.stage_split = absl::GetFlag(FLAGS_stage_split);
  config.worker_memory_budget = absl::GetFlag(FLAGS_worker_memory_budget);
  config.test_kill_self = absl::GetFlag(FLAGS_test_kill_self);
  config.stage_link_listen = absl::GetFlag(FLAGS_stage_link_listen);
  config.stage_link_previous = absl::GetFlag(FLAGS_stage_link_previous);
  if (const char* secret =
          std::getenv(ps::worker::pipeline::kStageLinkSecretVariable)) {
    config.stage_link_secret = secret;
  }
  return config;
}

}  // namespace
}  // namespace ps::worker

int main(int argc, char** argv) {
  // Before anything else, so that every thread inherits the mask
  // (common/stop_signals.h).
  absl::StatusOr<std::unique_ptr<ps::StopSignals>> signals =
      ps::StopSignals::Install({SIGTERM, SIGINT});
  if (!signals.ok()) {
    std::fprintf(stderr, "worker: %s\n",
                 std::string(signals.status().message()).c_str());
    return ps::kExitFailed;
  }
  ps::KeepFreedMemory();
  // Debian's Abseil checks every lock order at run time; a release binary
  // need not pay for it on each step's locks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(ps::worker::kUsage);
  absl::ParseCommandLine(argc, argv);

  // Training runs on this thread; a signal ends the process from the
  // signals' thread, abandoning the step in flight: the shards treat that
  // like a worker that died, and a replacement of the same rank resumes
  // where it stood.
  (*signals)->Watch([](int sig) {
    spdlog::warn(
        "stopping on signal {} ({}): the current step is abandoned "
        "(exit code {})",
        sig, strsignal(sig), ps::kExitTerminated);
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(ps::kExitTerminated);
  });
  ps::worker::WorkerConfig config = ps::worker::ConfigFromFlags();
  // Debian's Abseil keeps IsSpecifiedOnCommandLine() private: a value
  // other than the default is what counts as given.
  const absl::CommandLineFlag& num_workers =
      absl::GetFlagReflectionHandle(FLAGS_num_workers);
  absl::StatusOr<ps::worker::RankAndCount> place = ps::worker::ResolveRank(
      config, num_workers.CurrentValue() != num_workers.DefaultValue(),
      [](const char* name) { return std::getenv(name); });
  if (!place.ok()) {
    spdlog::error("bad flags: {}", place.status().message());
    return ps::kExitBadConfig;
  }
  config.num_workers = place->num_workers;
  config.local_rank = place->local_rank;
  ps::InitLogging("worker", place->rank);
  return ps::worker::WorkerRun(config, place->rank).Run();
}
