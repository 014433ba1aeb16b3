// The parameter-server shard binary. See --help; launchers pass the flags
// below and read --port_file to learn the bound port.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/chunk_wire.h"
#include "common/cluster_address.h"
#include "common/cpu_affinity.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/metrics_http.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "common/process_control.h"
#include "common/stop_signals.h"
#include "server/auth.h"
#include "server/checkpointer.h"
#include "server/grpc_server.h"
#include "server/hostname_index.h"
#include "server/local_stream_server.h"
#include "server/parameter_service.h"
#include "server/server_metrics.h"
#include "server/shard_host.h"
#include "server/update_coordinator.h"
#include "spdlog/spdlog.h"
#include "update/checkpoint.h"
#include "update/lr_schedule.h"
#include "update/optimizer.h"
#include "update/shard_store.h"

// Not a valid index: tells "not given" apart from -1.
constexpr int kServerIndexUnset = -2;

ABSL_FLAG(int, server_index, kServerIndexUnset,
          "This shard's index, in [0, --num_servers); -1 takes it from the "
          "hostname's trailing -<ordinal> (a Kubernetes StatefulSet pod).");
ABSL_FLAG(int, num_servers, 1, "Number of parameter-server shards.");
ABSL_FLAG(int, num_workers, 1, "Number of workers (ranks 0..n-1).");
ABSL_FLAG(int64_t, max_model_bytes, 0,
          "Largest model (float32 bytes of every declared tensor) rank 0 may "
          "declare; 0: --num_servers x 1/8 of this machine's memory (a shard "
          "keeps about four copies of its slice: weights, optimizer state, "
          "versions being sent).");
ABSL_FLAG(int, max_tensors, 100000, "Most tensors a declaration may hold.");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on.");
ABSL_FLAG(int, port, 0, "Port to listen on; 0 picks a free one.");
ABSL_FLAG(
    std::string, port_file, "",
    "If set, the bound port is written here (atomically) once listening.");
ABSL_FLAG(std::string, mode, "sync", "Consistency: sync, ssp or async.");
ABSL_FLAG(int, staleness, 0, "ssp only: how many clocks a worker may lead.");
// The optimizer flags are unset by default (OptimizerConfig's defaults
// apply), so that a server can tell a flag given from a default when a
// declaration carries the optimizer.
ABSL_FLAG(std::optional<std::string>, optimizer, std::nullopt,
          "adam (the default) or sgd. A declaration that carries the "
          "optimizer (the PyTorch layer's does) sets it and its "
          "hyper-parameters; the optimizer flags given must then agree with "
          "it.");
ABSL_FLAG(std::optional<float>, learning_rate, std::nullopt,
          "Optimizer learning rate (default 0.001).");
ABSL_FLAG(std::optional<float>, momentum, std::nullopt,
          "sgd momentum (default 0.9); 0 is plain SGD.");
ABSL_FLAG(std::optional<float>, weight_decay, std::nullopt,
          "L2 penalty added to the gradient (default 0).");
ABSL_FLAG(std::optional<float>, beta1, std::nullopt,
          "adam beta1 (default 0.9).");
ABSL_FLAG(std::optional<float>, beta2, std::nullopt,
          "adam beta2 (default 0.999).");
ABSL_FLAG(std::optional<float>, epsilon, std::nullopt,
          "adam epsilon (default 1e-8).");
ABSL_FLAG(int, max_message_mb,
          (ps::kMaxChunkElements * sizeof(float) >> 20) + 1,
          "Largest gRPC message, in MiB; larger ones are refused with "
          "RESOURCE_EXHAUSTED. The default holds the largest chunk clients "
          "send (32 MiB) and its message's fields.");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "constant, or cosine: decays --learning_rate to "
          "--min_learning_rate over the planned updates (the workers' "
          "planned steps; times --num_workers in ssp and async). Not for a "
          "declared optimizer, whose pushes carry their learning rate.");
ABSL_FLAG(float, min_learning_rate, 0.0f,
          "cosine: the learning rate at and after the last planned update.");
ABSL_FLAG(absl::Duration, worker_timeout, absl::Seconds(10),
          "A worker not heard from (any request, heartbeats included) for "
          "this long is dead, e.g. 10s or 500ms.");
ABSL_FLAG(std::string, on_worker_failure, "elastic",
          "When a worker is dead: fail (every request is refused with "
          "FAILED_PRECONDITION naming the dead worker, and the server exits "
          "with 1) or elastic (steps and clock minimums go on with the live "
          "workers; a restarted worker rejoins).");
ABSL_FLAG(absl::Duration, rejoin_grace, absl::Seconds(60),
          "When every other worker is done, how long the servers wait for a "
          "dead worker to be restarted and rejoin before they exit.");
ABSL_FLAG(absl::Duration, slow_wait_log, absl::Seconds(5),
          "A pull waiting this long logs which workers it waits for.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Where this shard writes its checkpoints (shard-<index>-<version>"
          ".ckpt, the newest 2 kept); empty: no checkpoints.");
ABSL_FLAG(int64_t, checkpoint_every_steps, 200,
          "A checkpoint every this many updates; 0: not by updates.");
ABSL_FLAG(int64_t, checkpoint_every_seconds, 60,
          "A checkpoint every this many seconds if the shard changed; 0: not "
          "by time. One is also written on SIGTERM/SIGINT and at the end.");
ABSL_FLAG(std::string, cpus, "",
          "CPUs this shard may run on, in the kernel's list format "
          "(\"0-3,8\"); empty: any. On a host shared with workers, separate "
          "cores for shards and workers keep the scheduler from moving them "
          "onto each other's.");
ABSL_FLAG(int, signal_exit_code, 0,
          "Exit code after SIGTERM or SIGINT (once the final checkpoint is "
          "written). A Kubernetes Job sets 143, so that a stopped shard is "
          "replaced rather than counted as finished.");
ABSL_FLAG(std::string, non_finite_gradients, "refuse",
          "refuse: a push holding a NaN or an infinity is refused whole, "
          "naming the tensor and element (each pushed byte is read once more "
          "to find out); skip: it is taken, and its non-finite elements "
          "leave their weights as they were. Either way no update makes a "
          "weight non-finite.");
ABSL_FLAG(int, max_threads, 0,
          "Most threads serving pulls and pushes at once, and as many for "
          "the other calls; each call in progress holds one, and calls "
          "beyond get RESOURCE_EXHAUSTED, so clients that leave calls hanging "
          "cannot make the server grow without bound. 0: 64 plus 4 per "
          "worker.");
ABSL_FLAG(int, max_calls_per_rank, 8,
          "Most pulls and pushes one worker rank may have open at once "
          "(a worker holds a push-and-pull stream and at times a pull); "
          "beyond, RESOURCE_EXHAUSTED. 0: no bound.");
ABSL_FLAG(absl::Duration, stream_idle_timeout, absl::Seconds(120),
          "A pull, push or push-and-pull whose client sends or takes no "
          "message for this long is cancelled, so that a client that leaves "
          "a call half-done does not hold a thread and what it staged for "
          "ever. A worker's stream waits at most for one layer's backward "
          "pass between messages.");
ABSL_FLAG(bool, local_transport, true,
          "Also serve pulls and pushes of workers on this host over a Unix "
          "socket (announced to registered workers; admitted only from this "
          "server's user with a secret the gRPC port hands out): fewer copies "
          "and thread hand-offs than gRPC over TCP. Workers elsewhere, or "
          "with --nolocal_transport, use gRPC.");
ABSL_FLAG(std::string, job_id, "",
          "The job this server belongs to: requests of another job are "
          "refused, so two jobs whose addresses overlap cannot mix their "
          "workers. Letters, digits, '.', '_' and '-'; the launcher makes "
          "one per run.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of this server: with --tls_key, clients "
          "must speak TLS and check it (their --tls_ca). Empty: plaintext.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM certificate of the CA that signs the clients' certificates: "
          "mutual TLS, a client without such a certificate cannot connect. "
          "Needs --tls_cert.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the job token (16 to 4096 visible ASCII characters, "
          "e.g. `openssl rand -hex 32`): every call but health checks must "
          "carry it, or is refused with UNAUTHENTICATED. Needs --tls_cert.");
ABSL_FLAG(int, health_port, -1,
          "If >= 0, also serve the health service alone on this port (0: a "
          "free one), in plaintext and without token, for probes that speak "
          "neither (Kubernetes' gRPC probes) when --tls_cert is set.");
ABSL_FLAG(int, metrics_port, 0,
          "If not 0, serve Prometheus metrics (push/pull counts, bytes and "
          "latency, waits, staleness, refusals, checkpoints) at "
          "http://<--metrics_host>:<port>/metrics.");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "IPv4 address the metrics endpoint listens on; 0.0.0.0 for every "
          "interface (a Kubernetes pod scraped from outside).");
ABSL_FLAG(bool, restore, false,
          "Resume from the newest readable checkpoint in --checkpoint_dir "
          "(start fresh if there is none); sync shards then catch up with "
          "the workers' clock. A finished run's checkpoint is refused "
          "(see --extend).");
ABSL_FLAG(bool, extend, false,
          "With --restore: train the checkpoint's run further under the "
          "plan its workers now register (more epochs or steps): a finished "
          "run's checkpoint is taken (its workers are no longer done), the "
          "first worker's planned steps replace the checkpoint's, and the "
          "learning-rate schedule spans the new plan (cosine: over the new "
          "total, from the update the run has reached). There must be a "
          "checkpoint to extend.");

namespace ps::server {
namespace {

constexpr int kMaxServers = 4096;
constexpr int kMaxWorkers = 65536;
constexpr absl::Duration kShutdownGrace = absl::Seconds(5);
// Under --on_worker_failure=fail: how long the other workers' requests are
// still answered (with FAILED_PRECONDITION, naming the dead worker) before
// the exit.
constexpr absl::Duration kFailureGrace = absl::Seconds(2);
constexpr absl::Duration kMaxDurationFlag = absl::Hours(24);

// Everything main needs, validated from the flags.
struct ServerConfig {
  int server_index = 0;
  int num_servers = 1;
  DeclarationLimits limits;
  std::string address;
  std::string port_file;
  CoordinatorOptions coordinator;
  // From the flags; a declared optimizer replaces it (ResolveOptimizer).
  OptimizerConfig optimizer;
  OptimizerFlagsGiven optimizer_given;
  int max_message_bytes = 0;
  std::optional<CheckpointPolicy> checkpoints;  // Unset: none.
  bool restore = false;
  bool extend = false;    // With restore.
  std::vector<int> cpus;  // Empty: any.
  std::string job_id;
  bool refuse_non_finite = true;
  int max_threads = 0;
  int max_calls_per_rank = 8;
  absl::Duration stream_idle_timeout;
  bool local_transport = true;
  int signal_exit_code = 0;
  ServerAuth auth;
  int health_port = -1;  // -1: none.
  std::string metrics_host;
  int metrics_port = 0;  // 0: no metrics.
};

// This machine's memory; 1 GiB if the system does not say.
uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return uint64_t{1} << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

absl::Status OutOfRange(absl::string_view flag, int64_t value, int64_t lo,
                        int64_t hi) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--", flag, " must be in [", lo, ", ", hi, "], got ", value));
}

absl::Status CheckDuration(absl::string_view flag, absl::Duration value) {
  if (value > absl::ZeroDuration() && value <= kMaxDurationFlag) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--", flag, " must be in (0, 24h], got ", absl::FormatDuration(value)));
}

// The liveness, learning-rate and checkpoint flags.
absl::Status FaultFlags(ServerConfig& c) {
  CoordinatorOptions& o = c.coordinator;
  o.worker_timeout = absl::GetFlag(FLAGS_worker_timeout);
  o.slow_wait_log = absl::GetFlag(FLAGS_slow_wait_log);
  o.rejoin_grace = absl::GetFlag(FLAGS_rejoin_grace);
  for (absl::Status s : {CheckDuration("worker_timeout", o.worker_timeout),
                         CheckDuration("rejoin_grace", o.rejoin_grace),
                         CheckDuration("slow_wait_log", o.slow_wait_log)}) {
    if (!s.ok()) return s;
  }
  absl::StatusOr<FailurePolicy> policy =
      ParseFailurePolicy(absl::GetFlag(FLAGS_on_worker_failure));
  if (!policy.ok()) return policy.status();
  o.on_worker_failure = *policy;

  absl::StatusOr<LrScheduleKind> schedule =
      ParseLrSchedule(absl::GetFlag(FLAGS_lr_schedule));
  if (!schedule.ok()) return schedule.status();
  absl::StatusOr<LearningRateSchedule> lr =
      LearningRateSchedule::Create(*schedule, c.optimizer.learning_rate,
                                   absl::GetFlag(FLAGS_min_learning_rate));
  if (!lr.ok()) return lr.status();
  o.lr_schedule = *lr;

  const std::string dir = absl::GetFlag(FLAGS_checkpoint_dir);
  const int64_t steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  const int64_t seconds = absl::GetFlag(FLAGS_checkpoint_every_seconds);
  if (steps < 0)
    return OutOfRange("checkpoint_every_steps", steps, 0, INT64_MAX);
  if (seconds < 0 || seconds > 86400 * 365) {
    return OutOfRange("checkpoint_every_seconds", seconds, 0, 86400 * 365);
  }
  c.restore = absl::GetFlag(FLAGS_restore);
  if (c.restore && dir.empty()) {
    return absl::InvalidArgumentError(
        "--restore needs --checkpoint_dir (where to restore from)");
  }
  c.extend = absl::GetFlag(FLAGS_extend);
  if (c.extend && !c.restore) {
    return absl::InvalidArgumentError(
        "--extend needs --restore (it says how a checkpoint is restored)");
  }
  if (!dir.empty()) {
    CheckpointPolicy policy;
    policy.dir = dir;
    policy.every_updates = static_cast<uint64_t>(steps);
    policy.every = absl::Seconds(seconds);
    c.checkpoints = policy;
  }
  // Only a restarted sync shard can be behind the workers' clock.
  o.fast_forward_after_restart = c.restore;
  o.replan_after_restore = c.extend;
  return absl::OkStatus();
}

absl::StatusOr<ServerConfig> ConfigFromFlags() {
  ServerConfig c;
  c.num_servers = absl::GetFlag(FLAGS_num_servers);
  if (c.num_servers < 1 || c.num_servers > kMaxServers) {
    return OutOfRange("num_servers", c.num_servers, 1, kMaxServers);
  }
  c.server_index = absl::GetFlag(FLAGS_server_index);
  if (c.server_index == kServerIndexUnset) {
    return absl::InvalidArgumentError(
        "--server_index is required: 0-based, or -1 to take it from the "
        "hostname");
  }
  if (c.server_index == -1) {
    absl::StatusOr<int> from_hostname = IndexFromThisHostname();
    if (!from_hostname.ok()) return from_hostname.status();
    c.server_index = *from_hostname;
  }
  if (c.server_index < 0 || c.server_index >= c.num_servers) {
    return OutOfRange("server_index", c.server_index, 0, c.num_servers - 1);
  }
  const int num_workers = absl::GetFlag(FLAGS_num_workers);
  if (num_workers < 1 || num_workers > kMaxWorkers) {
    return OutOfRange("num_workers", num_workers, 1, kMaxWorkers);
  }
  const int64_t max_model_bytes = absl::GetFlag(FLAGS_max_model_bytes);
  if (max_model_bytes < 0) {
    return OutOfRange("max_model_bytes", max_model_bytes, 0, INT64_MAX);
  }
  c.limits.max_model_bytes =
      max_model_bytes > 0
          ? static_cast<uint64_t>(max_model_bytes)
          : static_cast<uint64_t>(c.num_servers) * PhysicalMemoryBytes() / 8;
  c.limits.max_tensors = absl::GetFlag(FLAGS_max_tensors);
  if (c.limits.max_tensors < 1 || c.limits.max_tensors > 10000000) {
    return OutOfRange("max_tensors", c.limits.max_tensors, 1, 10000000);
  }

  const std::string host = absl::GetFlag(FLAGS_host);
  if (host.empty()) return absl::InvalidArgumentError("--host is empty");
  const int port = absl::GetFlag(FLAGS_port);
  if (port < 0 || port > 65535) return OutOfRange("port", port, 0, 65535);
  // An IPv6 literal needs brackets before the port.
  c.address = host.find(':') != std::string::npos
                  ? absl::StrCat("[", host, "]:", port)
                  : absl::StrCat(host, ":", port);
  c.port_file = absl::GetFlag(FLAGS_port_file);

  absl::StatusOr<ConsistencyMode> mode =
      ParseConsistencyMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) return mode.status();
  c.coordinator.mode = *mode;
  c.coordinator.num_workers = num_workers;
  c.coordinator.staleness = absl::GetFlag(FLAGS_staleness);
  if (c.coordinator.staleness < 0 || c.coordinator.staleness > 1000000) {
    return OutOfRange("staleness", c.coordinator.staleness, 0, 1000000);
  }
  if (c.coordinator.staleness != 0 && *mode != ConsistencyMode::kSsp) {
    return absl::InvalidArgumentError(
        absl::StrCat("--staleness=", c.coordinator.staleness,
                     " only applies to --mode=ssp, not --mode=",
                     ConsistencyModeName(*mode)));
  }

  if (const std::optional<std::string> name = absl::GetFlag(FLAGS_optimizer);
      name.has_value()) {
    absl::StatusOr<OptimizerKind> kind = ParseOptimizerKind(*name);
    if (!kind.ok()) return kind.status();
    c.optimizer.kind = *kind;
    c.optimizer_given.optimizer = true;
  }
  auto set = [](std::optional<float> flag, float& field, bool& given) {
    if (!flag.has_value()) return;
    field = *flag;
    given = true;
  };
  OptimizerConfig& o = c.optimizer;
  OptimizerFlagsGiven& g = c.optimizer_given;
  set(absl::GetFlag(FLAGS_learning_rate), o.learning_rate, g.learning_rate);
  set(absl::GetFlag(FLAGS_momentum), o.momentum, g.momentum);
  set(absl::GetFlag(FLAGS_weight_decay), o.weight_decay, g.weight_decay);
  set(absl::GetFlag(FLAGS_beta1), o.beta1, g.beta1);
  set(absl::GetFlag(FLAGS_beta2), o.beta2, g.beta2);
  set(absl::GetFlag(FLAGS_epsilon), o.epsilon, g.epsilon);
  if (absl::Status s = ValidateOptimizerConfig(o); !s.ok()) return s;

  const int mb = absl::GetFlag(FLAGS_max_message_mb);
  if (mb < 1 || mb > 2047) return OutOfRange("max_message_mb", mb, 1, 2047);
  c.max_message_bytes = mb << 20;
  if (absl::Status s = FaultFlags(c); !s.ok()) return s;
  absl::StatusOr<std::vector<int>> cpus =
      CpusFromFlag("cpus", absl::GetFlag(FLAGS_cpus));
  if (!cpus.ok()) return cpus.status();
  c.cpus = *std::move(cpus);
  const std::string non_finite = absl::GetFlag(FLAGS_non_finite_gradients);
  if (non_finite != "refuse" && non_finite != "skip") {
    return absl::InvalidArgumentError(
        absl::StrCat("--non_finite_gradients must be refuse or skip, got \"",
                     non_finite, "\""));
  }
  c.refuse_non_finite = non_finite == "refuse";
  c.max_threads = absl::GetFlag(FLAGS_max_threads);
  if (c.max_threads < 0 || c.max_threads > 100000) {
    return OutOfRange("max_threads", c.max_threads, 0, 100000);
  }
  // A worker holds a push-and-pull stream, a heartbeat and at times a pull.
  if (c.max_threads == 0) c.max_threads = 64 + 4 * num_workers;
  c.max_calls_per_rank = absl::GetFlag(FLAGS_max_calls_per_rank);
  if (c.max_calls_per_rank < 0 || c.max_calls_per_rank > 10000) {
    return OutOfRange("max_calls_per_rank", c.max_calls_per_rank, 0, 10000);
  }
  c.stream_idle_timeout = absl::GetFlag(FLAGS_stream_idle_timeout);
  c.local_transport = absl::GetFlag(FLAGS_local_transport);
  if (absl::Status s =
          CheckDuration("stream_idle_timeout", c.stream_idle_timeout);
      !s.ok()) {
    return s;
  }
  c.job_id = absl::GetFlag(FLAGS_job_id);
  if (absl::Status s = ValidateJobId(c.job_id); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--job_id: ", s.message()));
  }
  c.signal_exit_code = absl::GetFlag(FLAGS_signal_exit_code);
  if (c.signal_exit_code < 0 || c.signal_exit_code > 255) {
    return OutOfRange("signal_exit_code", c.signal_exit_code, 0, 255);
  }
  absl::StatusOr<ServerAuth> auth = LoadServerAuth(
      {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
       absl::GetFlag(FLAGS_tls_client_ca), absl::GetFlag(FLAGS_token_file)});
  if (!auth.ok()) return auth.status();
  c.auth = *std::move(auth);
  c.health_port = absl::GetFlag(FLAGS_health_port);
  if (c.health_port < -1 || c.health_port > 65535) {
    return OutOfRange("health_port", c.health_port, -1, 65535);
  }
  if (c.health_port > 0 && c.health_port == absl::GetFlag(FLAGS_port)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--health_port must differ from --port (both ", c.health_port, ")"));
  }
  c.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  c.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (absl::Status s = ValidateMetricsFlags(c.metrics_host, c.metrics_port);
      !s.ok()) {
    return s;
  }
  if (c.metrics_port > 0 && (c.metrics_port == absl::GetFlag(FLAGS_port) ||
                             c.metrics_port == c.health_port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port must differ from --port and "
                     "--health_port (",
                     c.metrics_port, ")"));
  }
  return c;
}

// Checks that the checkpoint directory can be written and, without
// --restore, that it holds no checkpoint of this shard (a later --restore
// would mix two runs).
absl::Status CheckCheckpointDir(const ServerConfig& config) {
  const std::string& dir = config.checkpoints->dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_dir: cannot create ", dir, ": ", ec.message()));
  }
  // Checkpoints are written in the background and on SIGTERM: find out now
  // that they cannot be, not when the pod is being stopped.
  const std::string probe =
      absl::StrCat(dir, "/.write-check-", config.server_index);
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (f == nullptr || std::fclose(f) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_dir: cannot write in ", dir, ": ", std::strerror(errno)));
  }
  std::remove(probe.c_str());
  if (config.restore) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> existing =
      ListCheckpoints(dir, config.server_index);
  if (!existing.ok()) return existing.status();
  if (existing->empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--checkpoint_dir ", dir, " holds checkpoints of shard ",
      config.server_index, " (newest ", existing->front(),
      "); pass --restore to resume from them, or use an empty directory"));
}

CheckpointIdentity IdentityOf(const ServerConfig& config) {
  return {config.num_servers, config.server_index,
          std::string(ConsistencyModeName(config.coordinator.mode)),
          config.coordinator.num_workers};
}

// With --restore: the newest readable checkpoint of this shard, or nullopt
// if there is none (the shard starts fresh; with --extend, an error).
absl::StatusOr<std::optional<LoadedCheckpoint>> FindCheckpoint(
    const ServerConfig& config) {
  const std::string& dir = config.checkpoints->dir;
  absl::StatusOr<std::optional<LoadedCheckpoint>> loaded =
      LoadNewestCheckpoint(dir, IdentityOf(config));
  if (!loaded.ok()) return loaded;
  if (!loaded->has_value()) {
    if (config.extend) {
      return absl::FailedPreconditionError(
          absl::StrCat("--extend: ", dir, " holds no checkpoint of shard ",
                       config.server_index, ", so there is no run to extend"));
    }
    spdlog::info("--restore: no checkpoint of shard {} in {}; starting fresh",
                 config.server_index, dir);
    return loaded;
  }
  LoadedCheckpoint& found = **loaded;
  for (const std::string& skipped : found.skipped) {
    spdlog::error("checkpoint refused, using an older one: {}", skipped);
  }
  std::vector<RankRecord>& ranks = found.checkpoint.ranks;
  if (!std::all_of(ranks.begin(), ranks.end(),
                   [](const RankRecord& r) { return r.done; })) {
    return loaded;
  }
  // Resuming a run that finished would only wait for workers with nothing
  // left to do; extending it gives them more.
  if (!config.extend) {
    return absl::FailedPreconditionError(absl::StrCat(
        found.path, " is of a finished run (every worker was done at version ",
        found.checkpoint.version,
        "): pass --extend to train it further under the workers' new plan, "
        "or start a new run in another --checkpoint_dir (a new PS_RUN_ID on "
        "Kubernetes)"));
  }
  for (RankRecord& rank : ranks) rank.done = false;
  spdlog::info(
      "--extend: {} is of a finished run (version {}, {} planned steps); its "
      "workers train on under the plan they register",
      found.path, found.checkpoint.version, found.checkpoint.planned_steps);
  return loaded;
}

// When `path` was last written; now if the system cannot say.
absl::Time ModificationTime(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::Now();
  return absl::TimeFromTimespec(st.st_mtim);
}

// Builds the shard of `model`: its slices, their coordinator and, with
// --checkpoint_dir, their checkpointer; restored from `checkpoint` if
// given. The coordinator ends the job through `shutdown`; checkpoints are
// counted in `metrics` if not null.
absl::StatusOr<std::unique_ptr<DeclaredShard>> BuildShard(
    const ServerConfig& config, const ModelSpec& model,
    const LoadedCheckpoint* checkpoint, ShutdownRequest* shutdown,
    ServerMetrics* metrics) {
  absl::StatusOr<Partition> partition =
      Partition::Create(model, config.num_servers);
  if (!partition.ok()) return partition.status();
  auto shard = std::make_unique<DeclaredShard>();
  absl::StatusOr<OptimizerConfig> optimizer = ResolveOptimizer(
      config.optimizer, config.optimizer_given, model.optimizer,
      checkpoint != nullptr ? absl::StrCat("the checkpoint ", checkpoint->path)
                            : std::string("rank 0"));
  if (!optimizer.ok()) return optimizer.status();
  absl::StatusOr<std::unique_ptr<ShardStore>> store =
      ShardStore::Create(*partition, config.server_index, *optimizer);
  if (!store.ok()) return store.status();
  shard->store = *std::move(store);
  CoordinatorOptions options = config.coordinator;
  if (model.optimizer.has_value()) {
    // A program that declares its optimizer sets the learning rate: each
    // push carries its scheduler's value, and one without is applied at
    // the declared rate. --lr_schedule is for the flags' optimizer (the
    // local launcher passes it whether given or not, so it is no error).
    absl::StatusOr<LearningRateSchedule> lr = LearningRateSchedule::Create(
        LrScheduleKind::kConstant, optimizer->learning_rate, 0);
    if (!lr.ok()) return lr.status();
    if (options.lr_schedule->kind() != LrScheduleKind::kConstant) {
      spdlog::warn(
          "--lr_schedule={} does not apply: the declaration carries the "
          "optimizer, whose learning rate the workers set",
          std::string(LrScheduleName(options.lr_schedule->kind())));
    }
    options.lr_schedule = *lr;
    spdlog::info("optimizer {} as declared", DescribeOptimizer(*optimizer));
  }
  // The shard outlives its coordinator's calls (gRPC stops first); a shard
  // still waiting for rank 0's values has nothing to keep.
  options.on_new_incarnation = [s = shard.get()] {
    if (s->checkpointer != nullptr && !s->store->awaiting_initial_values()) {
      s->checkpointer->RequestSoon();
    }
  };
  options.on_finished = [shutdown](const absl::Status& outcome) {
    if (outcome.ok()) {
      shutdown->Request("every worker is done (or dead)");
    } else {
      shutdown->Request(std::string(outcome.message()), kExitFailed);
    }
  };
  absl::StatusOr<std::unique_ptr<UpdateCoordinator>> coordinator =
      UpdateCoordinator::Create(shard->store.get(), std::move(options));
  if (!coordinator.ok()) return coordinator.status();
  shard->coordinator = *std::move(coordinator);
  if (checkpoint != nullptr) {
    if (absl::Status s = shard->coordinator->Restore(checkpoint->checkpoint);
        !s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("cannot restore ", checkpoint->path, ": ", s.message()));
    }
    shard->declared_by = absl::StrCat("the checkpoint ", checkpoint->path);
    if (metrics != nullptr) {
      metrics->RecordRestored();
      metrics->RecordCheckpoint(checkpoint->checkpoint.version,
                                ModificationTime(checkpoint->path));
    }
    spdlog::info("restored {}: version {}, {} tensors", checkpoint->path,
                 checkpoint->checkpoint.version, model.tensors.size());
  }
  if (config.checkpoints.has_value()) {
    UpdateCoordinator* c = shard->coordinator.get();
    CheckpointPolicy policy = *config.checkpoints;
    if (metrics != nullptr) {
      policy.on_written = [metrics](uint64_t version) {
        metrics->RecordCheckpoint(version, absl::Now());
      };
    }
    shard->checkpointer = std::make_unique<Checkpointer>(
        std::move(policy), [c] { return c->Snapshot(); },
        [c] { return c->version(); }, c->version());
  }
  shard->identity = {partition->fingerprint(), config.server_index,
                     config.coordinator.num_workers, config.job_id};
  for (const Slice& s : shard->store->slices()) {
    spdlog::debug("  slice {} [{}, {})", model.tensors[s.tensor_id].name,
                  s.offset, s.offset + s.num_elements);
  }
  return shard;
}

// `signals` were installed first thing in main.
int Run(const ServerConfig& config, StopSignals* signals) {
  // What a flood of refused calls made malloc keep goes back to the kernel.
  FreedMemoryTrimmer trimmer(absl::Seconds(2), size_t{16} << 20);
  ShutdownRequest shutdown;
  std::unique_ptr<ServerMetrics> metrics;  // Null: no metrics.
  ShardHost host(
      [&config, &shutdown, &metrics](const ModelSpec& model) {
        return BuildShard(config, model, nullptr, &shutdown, metrics.get());
      },
      config.limits);
  // After `host`, which its scrapes read: stops before it is destroyed.
  std::unique_ptr<MetricsEndpoint> endpoint;
  if (config.metrics_port > 0) {
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> started =
        MetricsEndpoint::Start(config.metrics_host, config.metrics_port);
    if (!started.ok()) {
      spdlog::error("--metrics_port: {}", started.status().message());
      return kExitFailed;
    }
    endpoint = *std::move(started);
    metrics = std::make_unique<ServerMetrics>(endpoint->registry(),
                                              config.server_index);
    endpoint->Add(ServerMetrics::ShardStateCollector(
        metrics.get(), [&host]() -> std::optional<ServerMetrics::ShardState> {
          const DeclaredShard* shard = host.get();
          if (shard == nullptr) return std::nullopt;
          return ServerMetrics::ShardState{
              shard->coordinator->version(),
              shard->coordinator->staleness().state()};
        }));
    spdlog::info("serving metrics on {}", endpoint->url());
  }
  if (config.checkpoints.has_value()) {
    absl::Status s = CheckCheckpointDir(config);
    absl::StatusOr<std::optional<LoadedCheckpoint>> found =
        std::optional<LoadedCheckpoint>();
    if (s.ok() && config.restore) {
      found = FindCheckpoint(config);
      s = found.status();
    }
    if (s.ok() && found->has_value()) {
      absl::StatusOr<std::unique_ptr<DeclaredShard>> restored =
          BuildShard(config, (**found).checkpoint.model, &**found, &shutdown,
                     metrics.get());
      if (restored.ok()) host.Install(*std::move(restored));
      s = restored.status();
    }
    if (!s.ok()) {
      spdlog::error("{}", s.ToString());
      // A checkpoint of another run (mode, model, shard count) is refused
      // with FailedPrecondition: configuration, which no retry fixes.
      return s.code() == absl::StatusCode::kInvalidArgument ||
                     s.code() == absl::StatusCode::kFailedPrecondition
                 ? kExitBadConfig
                 : kExitFailed;
    }
  }

  ServiceOptions service_options;
  service_options.server_index = config.server_index;
  service_options.num_workers = config.coordinator.num_workers;
  service_options.job_id = config.job_id;
  service_options.refuse_non_finite = config.refuse_non_finite;
  service_options.max_calls_per_rank = config.max_calls_per_rank;
  service_options.stream_idle_timeout = config.stream_idle_timeout;
  service_options.metrics = metrics.get();
  service_options.max_threads = config.max_threads;
  // Leave room for the message's other fields.
  service_options.max_chunk_elements =
      static_cast<uint64_t>(config.max_message_bytes - (64 << 10)) / 4;
  ParameterService service(&host, service_options);
  // Declared after the service, whose handlers it runs: destroyed first.
  std::unique_ptr<LocalStreamServer> local;
  if (config.local_transport) {
    LocalStreamServerOptions local_options;
    local_options.max_connections = config.max_threads;
    local_options.idle_timeout = config.stream_idle_timeout;
    local_options.max_message_bytes = config.max_message_bytes;
    absl::StatusOr<std::unique_ptr<LocalStreamServer>> started =
        LocalStreamServer::Start(&service.stream_service()->methods(),
                                 local_options);
    if (started.ok()) {
      local = *std::move(started);
      service.AnnounceLocalEndpoint(local->socket_name(), local->secret());
    } else {
      // Workers on this host then use gRPC, as workers elsewhere do.
      spdlog::warn("no same-host transport: {}", started.status().ToString());
    }
  }

  // A signal asks for the shutdown; the first request wins.
  RequestShutdownOnSignal(signals, config.signal_exit_code, &shutdown);

  GrpcServerOptions server_options;
  server_options.max_message_bytes = config.max_message_bytes;
  server_options.max_threads = config.max_threads;
  server_options.stream_service = service.stream_service();
  if (config.auth.tls()) {
    server_options.credentials = MakeServerCredentials(config.auth);
  }
  server_options.health_port = config.health_port;
  absl::StatusOr<std::unique_ptr<GrpcServer>> server = GrpcServer::Start(
      config.address, &service, proto::ParameterServer::service_full_name(),
      server_options);
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    shutdown.Request("startup failed");
    return kExitFailed;
  }
  const int port = (*server)->port();
  spdlog::info(
      "listening on {} (port {}), shard {} of {}, mode {}{}, {} workers, "
      "optimizer {} (unless declared), CPUs {}, job \"{}\"; {}",
      config.address, port, config.server_index, config.num_servers,
      std::string(ConsistencyModeName(config.coordinator.mode)),
      config.coordinator.mode == ConsistencyMode::kSsp
          ? absl::StrCat(" staleness ", config.coordinator.staleness)
          : "",
      config.coordinator.num_workers,
      std::string(OptimizerKindName(config.optimizer.kind)),
      config.cpus.empty() ? "any" : FormatCpuList(config.cpus), config.job_id,
      host.get() != nullptr
          ? absl::StrCat("holds ", host.get()->store->num_slices(),
                         " slices of the restored model")
          : absl::StrCat("waiting for rank 0 to declare the model (at most ",
                         config.limits.max_tensors, " tensors, ",
                         config.limits.max_model_bytes >> 20, " MiB)"));
  spdlog::info("connections: {}{}; health checks {}", config.auth.Describe(),
               local != nullptr ? ", and workers on this host over a Unix "
                                  "socket"
                                : "",
               (*server)->health_port() > 0
                   ? absl::StrCat("also on port ", (*server)->health_port(),
                                  " (plaintext, health only)")
                   : std::string("on the same port"));
  spdlog::info(
      "workers are dead after {} without a request (--on_worker_failure={}); "
      "learning rate {} {}; checkpoints {}",
      absl::FormatDuration(config.coordinator.worker_timeout),
      std::string(FailurePolicyName(config.coordinator.on_worker_failure)),
      std::string(LrScheduleName(config.coordinator.lr_schedule->kind())),
      config.optimizer.learning_rate,
      config.checkpoints.has_value()
          ? absl::StrCat("in ", config.checkpoints->dir, " every ",
                         config.checkpoints->every_updates, " updates / ",
                         absl::FormatDuration(config.checkpoints->every))
          : std::string("off"));
  if (!config.port_file.empty()) {
    if (absl::Status s = WritePortFile(config.port_file, port); !s.ok()) {
      spdlog::error("{}", s.ToString());
      shutdown.Request("port file failed");
      (*server)->Shutdown();
      return kExitFailed;
    }
  }

  const ShutdownRequest::Reason reason = shutdown.Wait();
  if (reason.exit_code == 0 || reason.by_signal) {
    spdlog::info("shutting down: {}", reason.text);
  } else {
    spdlog::error("shutting down in {}: {}",
                  absl::FormatDuration(kFailureGrace), reason.text);
    // Workers' requests meanwhile get FAILED_PRECONDITION naming the dead
    // worker, rather than UNAVAILABLE, which they would retry.
    absl::SleepFor(kFailureGrace);
  }
  // Wake waiting pulls first so that Shutdown need not wait out their polls;
  // the final checkpoint then sees no update in flight.
  if (DeclaredShard* shard = host.get(); shard != nullptr) {
    shard->coordinator->Shutdown();
    // A shard still waiting for rank 0's values has nothing to keep.
    if (shard->checkpointer != nullptr &&
        !shard->store->awaiting_initial_values()) {
      absl::StatusOr<std::string> written = shard->checkpointer->WriteNow();
      (void)written;  // Logged by the checkpointer.
    }
  }
  const absl::Time deadline = absl::Now() + kShutdownGrace;
  if (local != nullptr) {
    local->Shutdown(deadline);
    spdlog::info("same-host transport served {} calls on {} connections",
                 local->calls(), local->connections());
  }
  (*server)->Shutdown(deadline);
  spdlog::info("final report:\n{}", service.Report());
  return reason.exit_code;
}

}  // namespace
}  // namespace ps::server

int main(int argc, char** argv) {
  // First, before any thread exists, so every thread inherits the mask
  // (common/stop_signals.h).
  absl::StatusOr<std::unique_ptr<ps::StopSignals>> signals =
      ps::StopSignals::Install({SIGINT, SIGTERM});
  if (!signals.ok()) {
    std::fprintf(stderr, "server: %s\n",
                 std::string(signals.status().message()).c_str());
    return ps::kExitFailed;
  }
  // Before any thread allocates, so that the trimmer in Run can give back
  // what a flood of calls left behind.
  ps::UseOneMallocArena();
  ps::KeepFreedMemory();
  // Debian's Abseil checks every lock order at run time; a release binary
  // need not pay for it on each call's locks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(
      "A parameter-server shard: holds its slices of the model, applies "
      "workers' gradients and serves weights over gRPC.\n"
      "  server --server_index=0 --num_servers=2 --num_workers=4 "
      "--mode=sync --port_file=/tmp/ps0.port\n"
      "It holds whatever model rank 0 declares (or a restored checkpoint "
      "holds).\n"
      "Exit codes: 0 every worker is done, or stopped by SIGTERM/SIGINT "
      "after the final checkpoint (see --signal_exit_code); 1 failed (the "
      "log says why; worth a retry); 2 bad configuration: flags, a "
      "--checkpoint_dir it cannot write, or a checkpoint of another run "
      "(never retry).");
  if (absl::Status s = ps::server::CheckFlagSyntax(argc, argv); !s.ok()) {
    std::fprintf(stderr, "server: %s\n", std::string(s.message()).c_str());
    return ps::kExitBadConfig;
  }
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "server: unexpected argument \"%s\" (see --help)\n",
                 rest[1]);
    return ps::kExitBadConfig;
  }
  absl::StatusOr<ps::server::ServerConfig> config =
      ps::server::ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "server: %s\n",
                 std::string(config.status().message()).c_str());
    return ps::kExitBadConfig;
  }
  if (!config->cpus.empty()) {
    if (absl::Status s = ps::RestrictProcessToCpus(config->cpus); !s.ok()) {
      std::fprintf(stderr, "server: --cpus: %s\n",
                   std::string(s.message()).c_str());
      return ps::kExitBadConfig;
    }
  }
  ps::InitLogging("server", config->server_index);
  return ps::server::Run(*config, signals->get());
}
