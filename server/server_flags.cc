#include "server/server_flags.h"

#include <cstdint>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace {

// The flags' defaults: ServerFlags' own, so that they have one home.
const ps::server::ServerFlags& Default() {
  static const auto* const defaults = new ps::server::ServerFlags();
  return *defaults;
}

}  // namespace

ABSL_FLAG(int, server_index, Default().server_index,
          "This shard's index, in [0, --num_servers); -1 takes it from the "
          "hostname's trailing -<ordinal> (a Kubernetes StatefulSet pod).");
ABSL_FLAG(int, num_servers, Default().num_servers,
          "Number of parameter-server shards.");
ABSL_FLAG(int, num_workers, Default().num_workers,
          "Number of workers (ranks 0..n-1).");
ABSL_FLAG(int64_t, max_model_bytes, Default().max_model_bytes,
          "Largest model (float32 bytes of every declared tensor) rank 0 may "
          "declare; 0: --num_servers x 1/8 of this machine's memory (a shard "
          "keeps about four copies of its slice: weights, optimizer state, "
          "versions being sent).");
ABSL_FLAG(int, max_tensors, Default().max_tensors,
          "Most tensors a declaration may hold.");
ABSL_FLAG(std::string, host, Default().host, "Address to listen on.");
ABSL_FLAG(int, port, Default().port, "Port to listen on; 0 picks a free one.");
ABSL_FLAG(
    std::string, port_file, Default().port_file,
    "If set, the bound port is written here (atomically) once listening.");
ABSL_FLAG(std::string, report_file, Default().report_file,
          "If set, the shard's final report is written here (atomically) at "
          "exit, for programs to read (server/shard_report.h); not written "
          "when no model was declared.");
ABSL_FLAG(std::string, mode, Default().mode,
          "Consistency: sync, ssp or async.");
ABSL_FLAG(int, staleness, Default().staleness,
          "ssp only (>= 1): how many steps a worker may lead the slowest.");
// The optimizer flags are unset by default (OptimizerConfig's defaults
// apply), so that a server can tell a flag given from a default when a
// declaration carries the optimizer.
ABSL_FLAG(std::optional<std::string>, optimizer, Default().optimizer,
          "adam (the default) or sgd. A declaration that carries the "
          "optimizer (the PyTorch layer's does) sets it and its "
          "hyper-parameters; the optimizer flags given must then agree with "
          "it.");
ABSL_FLAG(std::optional<float>, learning_rate, Default().learning_rate,
          "Optimizer learning rate (default 0.001).");
ABSL_FLAG(std::optional<float>, momentum, Default().momentum,
          "sgd momentum (default 0.9); 0 is plain SGD.");
ABSL_FLAG(std::optional<float>, weight_decay, Default().weight_decay,
          "L2 penalty added to the gradient (default 0).");
ABSL_FLAG(std::optional<float>, beta1, Default().beta1,
          "adam beta1 (default 0.9).");
ABSL_FLAG(std::optional<float>, beta2, Default().beta2,
          "adam beta2 (default 0.999).");
ABSL_FLAG(std::optional<float>, epsilon, Default().epsilon,
          "adam epsilon (default 1e-8).");
ABSL_FLAG(int, max_message_mb, Default().max_message_mb,
          "Largest gRPC message, in MiB; larger ones are refused with "
          "RESOURCE_EXHAUSTED. The default holds the largest chunk clients "
          "send (32 MiB) and its message's fields.");
ABSL_FLAG(std::string, lr_schedule, Default().lr_schedule,
          "constant, or cosine: decays --learning_rate to "
          "--min_learning_rate over the planned updates (the workers' "
          "planned steps; times --num_workers in ssp and async). Not for a "
          "declared optimizer, whose pushes carry their learning rate.");
ABSL_FLAG(float, min_learning_rate, Default().min_learning_rate,
          "cosine: the learning rate at and after the last planned update.");
ABSL_FLAG(absl::Duration, worker_timeout, Default().worker_timeout,
          "A worker not heard from (any request, heartbeats included) for "
          "this long is dead, e.g. 10s or 500ms.");
ABSL_FLAG(std::string, on_worker_failure, Default().on_worker_failure,
          "When a worker is dead: fail (every request is refused with "
          "FAILED_PRECONDITION naming the dead worker, and the server exits "
          "with 1) or elastic (steps and clock minimums go on with the live "
          "workers; a restarted worker rejoins).");
ABSL_FLAG(absl::Duration, rejoin_grace, Default().rejoin_grace,
          "When every other worker is done, how long the servers wait for a "
          "dead worker to be restarted and rejoin before they exit.");
ABSL_FLAG(absl::Duration, slow_wait_log, Default().slow_wait_log,
          "A pull waiting this long logs which workers it waits for.");
ABSL_FLAG(std::string, checkpoint_dir, Default().checkpoint_dir,
          "Where this shard writes its checkpoints (shard-<index>-<version>"
          ".ckpt, the newest 2 kept); empty: no checkpoints.");
ABSL_FLAG(int64_t, checkpoint_every_steps, Default().checkpoint_every_steps,
          "A checkpoint every this many updates; 0: not by updates.");
ABSL_FLAG(int64_t, checkpoint_every_seconds, Default().checkpoint_every_seconds,
          "A checkpoint every this many seconds if the shard changed; 0: not "
          "by time. One is also written on SIGTERM/SIGINT and at the end.");
ABSL_FLAG(bool, update_log, Default().update_log,
          "With --checkpoint_dir: log every update before acknowledging it "
          "(shard-<index>-<version>.wal beside the checkpoints; in sync a "
          "step's mean, once, and a push is acknowledged with its step), so "
          "that a shard killed and restarted with --restore replays the "
          "updates since its checkpoint and loses none.");
ABSL_FLAG(bool, update_log_fsync, Default().update_log_fsync,
          "fdatasync each update log append before acknowledging the update: "
          "the log then survives a power loss, not only a killed process.");
ABSL_FLAG(int64_t, update_log_preallocate_mb,
          Default().update_log_preallocate_mb,
          "MiB of an update log file kept written past its last record, on a "
          "thread of the shard, so that appends write over the file's blocks "
          "instead of growing it (a file is cut to its records when closed); "
          "0: none.");
ABSL_FLAG(int, testonly_kill_in_checkpoint,
          Default().testonly_kill_in_checkpoint,
          "Tests only: SIGKILL this process halfway through writing its Nth "
          "checkpoint (0: never).");
ABSL_FLAG(std::string, cpus, Default().cpus,
          "CPUs this shard may run on, in the kernel's list format "
          "(\"0-3,8\"); empty: any. On a host shared with workers, separate "
          "cores for shards and workers keep the scheduler from moving them "
          "onto each other's.");
ABSL_FLAG(int, signal_exit_code, Default().signal_exit_code,
          "Exit code after SIGTERM or SIGINT (once the final checkpoint is "
          "written). A Kubernetes Job sets 143, so that a stopped shard is "
          "replaced rather than counted as finished.");
ABSL_FLAG(std::string, non_finite_gradients, Default().non_finite_gradients,
          "refuse: a push holding a NaN or an infinity is refused whole, "
          "naming the tensor and element (each pushed byte is read once more "
          "to find out); skip: it is taken, and its non-finite elements "
          "leave their weights as they were. Either way no update makes a "
          "weight non-finite.");
ABSL_FLAG(int, max_threads, Default().max_threads,
          "Most threads serving pulls and pushes at once, and as many for "
          "the other calls; each call in progress holds one, and calls "
          "beyond get RESOURCE_EXHAUSTED, so clients that leave calls hanging "
          "cannot make the server grow without bound. 0: 64 plus 4 per "
          "worker.");
ABSL_FLAG(int, max_calls_per_rank, Default().max_calls_per_rank,
          "Most pulls and pushes one worker rank may have open at once "
          "(a worker holds a push-and-pull stream and at times a pull); "
          "beyond, RESOURCE_EXHAUSTED. 0: no bound.");
ABSL_FLAG(absl::Duration, stream_idle_timeout, Default().stream_idle_timeout,
          "A pull, push or push-and-pull whose client sends or takes no "
          "message for this long is cancelled, so that a client that leaves "
          "a call half-done does not hold a thread and what it staged for "
          "ever. A worker's stream waits at most for one layer's backward "
          "pass between messages.");
ABSL_FLAG(bool, local_transport, Default().local_transport,
          "Also serve pulls and pushes of workers on this host over a Unix "
          "socket (announced to registered workers; admitted only from this "
          "server's user with a secret the gRPC port hands out): fewer copies "
          "and thread hand-offs than gRPC over TCP. Workers elsewhere, or "
          "with --nolocal_transport, use gRPC.");
ABSL_FLAG(std::optional<int>, tcp_data_port, Default().tcp_data_port,
          "Serve the pulls and pushes of workers on other hosts as the "
          "same-host transport's frames over TCP at this port of --host (0: a "
          "free one, announced to registered workers), admitted with the "
          "secret the gRPC port hands out; not encrypted. -1: none, workers "
          "elsewhere use gRPC. Unset: 0 without --tls_cert, -1 with it "
          "(bench/README.md, \"Frames over TCP\", says why); a port with "
          "--tls_cert or --nolocal_transport is refused.");
ABSL_FLAG(std::string, job_id, Default().job_id,
          "The job this server belongs to: requests of another job are "
          "refused, so two jobs whose addresses overlap cannot mix their "
          "workers. Letters, digits, '.', '_' and '-'; the launcher makes "
          "one per run.");
ABSL_FLAG(std::string, tls_cert, Default().tls_cert,
          "PEM certificate (chain) of this server: with --tls_key, clients "
          "must speak TLS and check it (their --tls_ca). Empty: plaintext.");
ABSL_FLAG(std::string, tls_key, Default().tls_key,
          "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, Default().tls_client_ca,
          "PEM certificate of the CA that signs the clients' certificates: "
          "mutual TLS, a client without such a certificate cannot connect. "
          "Needs --tls_cert.");
ABSL_FLAG(std::string, token_file, Default().token_file,
          "File holding the job token (16 to 4096 visible ASCII characters, "
          "e.g. `openssl rand -hex 32`): every call but health checks must "
          "carry it, or is refused with UNAUTHENTICATED. Needs --tls_cert.");
ABSL_FLAG(int, health_port, Default().health_port,
          "If >= 0, also serve the health service alone on this port (0: a "
          "free one), in plaintext and without token, for probes that speak "
          "neither (Kubernetes' gRPC probes) when --tls_cert is set.");
ABSL_FLAG(int, metrics_port, Default().metrics_port,
          "If not 0, serve Prometheus metrics (push/pull counts, bytes and "
          "latency, waits, staleness, refusals, checkpoints) at "
          "http://<--metrics_host>:<port>/metrics.");
ABSL_FLAG(std::string, metrics_host, Default().metrics_host,
          "IPv4 address the metrics endpoint listens on; 0.0.0.0 for every "
          "interface (a Kubernetes pod scraped from outside).");
ABSL_FLAG(bool, restore, Default().restore,
          "Resume from the newest readable checkpoint in --checkpoint_dir "
          "(start fresh if there is none); sync shards then catch up with "
          "the workers' clock. A finished run's checkpoint is refused "
          "(see --extend).");
ABSL_FLAG(bool, extend, Default().extend,
          "With --restore: train the checkpoint's run further under the "
          "plan its workers now register (more epochs or steps): a finished "
          "run's checkpoint is taken (its workers are no longer done), the "
          "first worker's planned steps replace the checkpoint's, and the "
          "learning-rate schedule spans the new plan (cosine: over the new "
          "total, from the update the run has reached). There must be a "
          "checkpoint to extend.");

namespace ps::server {

ServerFlags ServerFlagValues() {
  ServerFlags f;
  f.server_index = absl::GetFlag(FLAGS_server_index);
  f.num_servers = absl::GetFlag(FLAGS_num_servers);
  f.num_workers = absl::GetFlag(FLAGS_num_workers);
  f.max_model_bytes = absl::GetFlag(FLAGS_max_model_bytes);
  f.max_tensors = absl::GetFlag(FLAGS_max_tensors);
  f.host = absl::GetFlag(FLAGS_host);
  f.port = absl::GetFlag(FLAGS_port);
  f.port_file = absl::GetFlag(FLAGS_port_file);
  f.report_file = absl::GetFlag(FLAGS_report_file);
  f.mode = absl::GetFlag(FLAGS_mode);
  f.staleness = absl::GetFlag(FLAGS_staleness);
  f.optimizer = absl::GetFlag(FLAGS_optimizer);
  f.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  f.momentum = absl::GetFlag(FLAGS_momentum);
  f.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  f.beta1 = absl::GetFlag(FLAGS_beta1);
  f.beta2 = absl::GetFlag(FLAGS_beta2);
  f.epsilon = absl::GetFlag(FLAGS_epsilon);
  f.max_message_mb = absl::GetFlag(FLAGS_max_message_mb);
  f.lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  f.min_learning_rate = absl::GetFlag(FLAGS_min_learning_rate);
  f.worker_timeout = absl::GetFlag(FLAGS_worker_timeout);
  f.on_worker_failure = absl::GetFlag(FLAGS_on_worker_failure);
  f.rejoin_grace = absl::GetFlag(FLAGS_rejoin_grace);
  f.slow_wait_log = absl::GetFlag(FLAGS_slow_wait_log);
  f.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  f.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  f.checkpoint_every_seconds = absl::GetFlag(FLAGS_checkpoint_every_seconds);
  f.update_log = absl::GetFlag(FLAGS_update_log);
  f.update_log_fsync = absl::GetFlag(FLAGS_update_log_fsync);
  f.update_log_preallocate_mb = absl::GetFlag(FLAGS_update_log_preallocate_mb);
  f.testonly_kill_in_checkpoint =
      absl::GetFlag(FLAGS_testonly_kill_in_checkpoint);
  f.cpus = absl::GetFlag(FLAGS_cpus);
  f.signal_exit_code = absl::GetFlag(FLAGS_signal_exit_code);
  f.non_finite_gradients = absl::GetFlag(FLAGS_non_finite_gradients);
  f.max_threads = absl::GetFlag(FLAGS_max_threads);
  f.max_calls_per_rank = absl::GetFlag(FLAGS_max_calls_per_rank);
  f.stream_idle_timeout = absl::GetFlag(FLAGS_stream_idle_timeout);
  f.local_transport = absl::GetFlag(FLAGS_local_transport);
  f.tcp_data_port = absl::GetFlag(FLAGS_tcp_data_port);
  f.job_id = absl::GetFlag(FLAGS_job_id);
  f.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  f.tls_key = absl::GetFlag(FLAGS_tls_key);
  f.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  f.token_file = absl::GetFlag(FLAGS_token_file);
  f.health_port = absl::GetFlag(FLAGS_health_port);
  f.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  f.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  f.restore = absl::GetFlag(FLAGS_restore);
  f.extend = absl::GetFlag(FLAGS_extend);
  return f;
}

void ListServerFlagsInHelp() {
  auto here = [](absl::string_view file) {
    return absl::EndsWith(file, "server/server_flags.cc");
  };
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = here;
  config.contains_help_flags = here;
  config.contains_helppackage_flags = here;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace ps::server
