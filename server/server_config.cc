#include "server/server_config.h"

#include <unistd.h>

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_address.h"
#include "common/consistency_mode.h"
#include "common/cpu_affinity.h"
#include "common/flag_range.h"
#include "common/metrics_http.h"
#include "server/failure_policy.h"
#include "update/lr_schedule.h"

namespace ps::server {
namespace {

constexpr int kMaxServers = 4096;
constexpr int kMaxWorkers = 65536;
constexpr absl::Duration kMaxDurationFlag = absl::Hours(24);
constexpr int64_t kMaxCheckpointSeconds = int64_t{86400} * 365;
constexpr int64_t kMaxPreallocateMb = int64_t{1} << 20;  // 1 TiB.

absl::Status CheckDuration(absl::string_view flag, absl::Duration value) {
  if (value > absl::ZeroDuration() && value <= kMaxDurationFlag) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--", flag, " must be in (0, 24h], got ", absl::FormatDuration(value)));
}

// --server_index, --num_servers, --num_workers and the declaration limits.
absl::Status LayoutFlags(const ServerFlags& f, const MachineFacts& machine,
                         ServerConfig& c) {
  c.num_servers = f.num_servers;
  if (absl::Status s =
          CheckFlagRange("num_servers", c.num_servers, 1, kMaxServers);
      !s.ok()) {
    return s;
  }
  c.server_index = f.server_index;
  if (c.server_index == kServerIndexUnset) {
    return absl::InvalidArgumentError(
        "--server_index is required: 0-based, or -1 to take it from the "
        "hostname");
  }
  if (c.server_index == -1) {
    absl::StatusOr<int> from_hostname = machine.index_from_hostname();
    if (!from_hostname.ok()) return from_hostname.status();
    c.server_index = *from_hostname;
  }
  if (absl::Status s =
          CheckFlagRange("server_index", c.server_index, 0, c.num_servers - 1);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckFlagRange("num_workers", f.num_workers, 1, kMaxWorkers);
      !s.ok()) {
    return s;
  }
  c.coordinator.num_workers = f.num_workers;
  if (absl::Status s =
          CheckFlagRange("max_model_bytes", f.max_model_bytes, 0, INT64_MAX);
      !s.ok()) {
    return s;
  }
  c.limits.max_model_bytes =
      f.max_model_bytes > 0
          ? static_cast<uint64_t>(f.max_model_bytes)
          : static_cast<uint64_t>(c.num_servers) * machine.memory_bytes / 8;
  c.limits.max_tensors = f.max_tensors;
  if (absl::Status s =
          CheckFlagRange("max_tensors", c.limits.max_tensors, 1, 10000000);
      !s.ok()) {
    return s;
  }
  return absl::OkStatus();
}

// --host, --port, --port_file, --mode and --staleness.
absl::Status ServingFlags(const ServerFlags& f, ServerConfig& c) {
  if (f.host.empty()) return absl::InvalidArgumentError("--host is empty");
  if (absl::Status s = CheckFlagRange("port", f.port, 0, 65535); !s.ok()) {
    return s;
  }
  // An IPv6 literal needs brackets before the port.
  c.address = f.host.find(':') != std::string::npos
                  ? absl::StrCat("[", f.host, "]:", f.port)
                  : absl::StrCat(f.host, ":", f.port);
  c.port_file = f.port_file;
  c.report_file = f.report_file;

  absl::StatusOr<ConsistencyMode> mode = ParseConsistencyMode(f.mode);
  if (!mode.ok()) return mode.status();
  c.coordinator.mode = *mode;
  c.coordinator.staleness = f.staleness;
  // The launcher checks the same rule (common/consistency_mode.h).
  return CheckStaleness(*mode, f.staleness);
}

// The optimizer's flags: each one given is recorded as given.
absl::Status OptimizerFlags(const ServerFlags& f, ServerConfig& c) {
  if (f.optimizer.has_value()) {
    absl::StatusOr<OptimizerKind> kind =
        update::ParseOptimizerKind(*f.optimizer);
    if (!kind.ok()) return kind.status();
    c.optimizer.kind = *kind;
    c.optimizer_given.optimizer = true;
  }
  auto set = [](std::optional<float> flag, float& field, bool& given) {
    if (!flag.has_value()) return;
    field = *flag;
    given = true;
  };
  update::OptimizerConfig& o = c.optimizer;
  update::OptimizerFlagsGiven& g = c.optimizer_given;
  set(f.learning_rate, o.learning_rate, g.learning_rate);
  set(f.momentum, o.momentum, g.momentum);
  set(f.weight_decay, o.weight_decay, g.weight_decay);
  set(f.beta1, o.beta1, g.beta1);
  set(f.beta2, o.beta2, g.beta2);
  set(f.epsilon, o.epsilon, g.epsilon);
  return update::ValidateOptimizerConfig(o);
}

// The liveness, learning-rate and checkpoint flags.
absl::Status FaultFlags(const ServerFlags& f, ServerConfig& c) {
  CoordinatorOptions& o = c.coordinator;
  o.worker_timeout = f.worker_timeout;
  o.slow_wait_log = f.slow_wait_log;
  o.rejoin_grace = f.rejoin_grace;
  for (absl::Status s : {CheckDuration("worker_timeout", o.worker_timeout),
                         CheckDuration("rejoin_grace", o.rejoin_grace),
                         CheckDuration("slow_wait_log", o.slow_wait_log)}) {
    if (!s.ok()) return s;
  }
  absl::StatusOr<FailurePolicy> policy =
      ParseFailurePolicy(f.on_worker_failure);
  if (!policy.ok()) return policy.status();
  o.on_worker_failure = *policy;

  absl::StatusOr<update::LrScheduleKind> schedule =
      update::ParseLrSchedule(f.lr_schedule);
  if (!schedule.ok()) return schedule.status();
  absl::StatusOr<update::LearningRateSchedule> lr =
      update::LearningRateSchedule::Create(*schedule, c.optimizer.learning_rate,
                                           f.min_learning_rate);
  if (!lr.ok()) return lr.status();
  o.lr_schedule = *lr;

  const int64_t steps = f.checkpoint_every_steps;
  const int64_t seconds = f.checkpoint_every_seconds;
  if (absl::Status s =
          CheckFlagRange("checkpoint_every_steps", steps, 0, INT64_MAX);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckFlagRange("checkpoint_every_seconds", seconds, 0,
                                      kMaxCheckpointSeconds);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckFlagRange("update_log_preallocate_mb",
                         f.update_log_preallocate_mb, 0, kMaxPreallocateMb);
      !s.ok()) {
    return s;
  }
  if (f.restore && f.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        "--restore needs --checkpoint_dir (where to restore from)");
  }
  if (f.extend && !f.restore) {
    return absl::InvalidArgumentError(
        "--extend needs --restore (it says how a checkpoint is restored)");
  }
  c.restore = f.extend    ? RestoreMode::kExtend
              : f.restore ? RestoreMode::kRestore
                          : RestoreMode::kNone;
  if (!f.checkpoint_dir.empty()) {
    CheckpointPolicy policy;
    policy.dir = f.checkpoint_dir;
    policy.every_updates = static_cast<uint64_t>(steps);
    policy.every = absl::Seconds(seconds);
    policy.kill_in_write = f.testonly_kill_in_checkpoint;
    c.checkpoints = policy;
    if (f.update_log) {
      o.update_log_dir = f.checkpoint_dir;
      o.update_log_fsync = f.update_log_fsync;
      o.update_log_preallocate_bytes =
          static_cast<uint64_t>(f.update_log_preallocate_mb) << 20;
    }
  }
  // Only a restarted sync shard can be behind the workers' clock.
  o.fast_forward_after_restart = f.restore;
  o.replan_after_restore = f.extend;
  return absl::OkStatus();
}

// The per-process resources: CPUs, threads, calls, streams.
absl::Status ResourceFlags(const ServerFlags& f, ServerConfig& c) {
  absl::StatusOr<std::vector<int>> cpus = CpusFromFlag("cpus", f.cpus);
  if (!cpus.ok()) return cpus.status();
  c.cpus = *std::move(cpus);
  if (f.non_finite_gradients != "refuse" && f.non_finite_gradients != "skip") {
    return absl::InvalidArgumentError(
        absl::StrCat("--non_finite_gradients must be refuse or skip, got \"",
                     f.non_finite_gradients, "\""));
  }
  c.refuse_non_finite = f.non_finite_gradients == "refuse";
  c.max_threads = f.max_threads;
  if (absl::Status s = CheckFlagRange("max_threads", c.max_threads, 0, 100000);
      !s.ok()) {
    return s;
  }
  // A worker holds a push-and-pull stream, a heartbeat and at times a pull.
  if (c.max_threads == 0) c.max_threads = 64 + 4 * c.coordinator.num_workers;
  c.max_calls_per_rank = f.max_calls_per_rank;
  if (absl::Status s =
          CheckFlagRange("max_calls_per_rank", c.max_calls_per_rank, 0, 10000);
      !s.ok()) {
    return s;
  }
  c.stream_idle_timeout = f.stream_idle_timeout;
  c.local_transport = f.local_transport;
  if (f.tcp_data_port.has_value()) {
    if (absl::Status s =
            CheckFlagRange("tcp_data_port", *f.tcp_data_port, -1, 65535);
        !s.ok()) {
      return s;
    }
  }
  return CheckDuration("stream_idle_timeout", c.stream_idle_timeout);
}

// The job, the signal exit code, authentication and the side ports.
absl::Status AccessFlags(const ServerFlags& f, ServerConfig& c) {
  c.job_id = f.job_id;
  if (absl::Status s = ValidateJobId(c.job_id); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--job_id: ", s.message()));
  }
  c.signal_exit_code = f.signal_exit_code;
  if (absl::Status s =
          CheckFlagRange("signal_exit_code", c.signal_exit_code, 0, 255);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<ServerAuth> auth =
      LoadServerAuth({f.tls_cert, f.tls_key, f.tls_client_ca, f.token_file});
  if (!auth.ok()) return auth.status();
  c.auth = *std::move(auth);
  c.health_port = f.health_port;
  if (absl::Status s = CheckFlagRange("health_port", c.health_port, -1, 65535);
      !s.ok()) {
    return s;
  }
  if (c.health_port > 0 && c.health_port == f.port) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--health_port must differ from --port (both ", c.health_port, ")"));
  }
  c.metrics_host = f.metrics_host;
  c.metrics_port = f.metrics_port;
  if (absl::Status s = ValidateMetricsFlags(c.metrics_host, c.metrics_port);
      !s.ok()) {
    return s;
  }
  if (c.metrics_port > 0 &&
      (c.metrics_port == f.port || c.metrics_port == c.health_port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port must differ from --port and "
                     "--health_port (",
                     c.metrics_port, ")"));
  }
  return absl::OkStatus();
}

// Frames over TCP by default (bench/README.md, "Frames over TCP": on idle
// cores they beat gRPC in every row at about half its CPU per byte), but
// never in clear beside a TLS port, and only as the same-host transport's
// frames. Its range was checked (ResourceFlags); needs the TLS flags read
// (AccessFlags).
absl::Status TcpDataPortFlag(const ServerFlags& f, ServerConfig& c) {
  if (!f.tcp_data_port.has_value()) {
    c.tcp_data_port = c.local_transport && !c.auth.tls() ? 0 : -1;
    return absl::OkStatus();
  }
  c.tcp_data_port = *f.tcp_data_port;
  if (c.tcp_data_port < 0) return absl::OkStatus();
  if (c.auth.tls()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tcp_data_port=", c.tcp_data_port,
        " would carry tensors in clear beside the TLS port (--tls_cert); with "
        "TLS they cross hosts over gRPC only: leave --tcp_data_port out or "
        "set it to -1"));
  }
  if (!c.local_transport) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tcp_data_port=", c.tcp_data_port,
        " serves the same-host transport's frames over TCP, which "
        "--nolocal_transport turns off: leave --tcp_data_port out or set it "
        "to -1"));
  }
  if (c.tcp_data_port > 0 &&
      (c.tcp_data_port == f.port || c.tcp_data_port == c.health_port ||
       c.tcp_data_port == c.metrics_port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tcp_data_port must differ from --port, --health_port "
                     "and --metrics_port (",
                     c.tcp_data_port, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

MachineFacts MachineFacts::OfThisMachine() {
  MachineFacts facts;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    facts.memory_bytes =
        static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
  }
  return facts;
}

absl::StatusOr<ServerConfig> MakeServerConfig(const ServerFlags& flags,
                                              const MachineFacts& machine) {
  ServerConfig c;
  if (absl::Status s = LayoutFlags(flags, machine, c); !s.ok()) return s;
  if (absl::Status s = ServingFlags(flags, c); !s.ok()) return s;
  if (absl::Status s = OptimizerFlags(flags, c); !s.ok()) return s;
  const int mb = flags.max_message_mb;
  if (absl::Status s = CheckFlagRange("max_message_mb", mb, 1, 2047); !s.ok()) {
    return s;
  }
  c.max_message_bytes = mb << 20;
  if (absl::Status s = FaultFlags(flags, c); !s.ok()) return s;
  if (absl::Status s = ResourceFlags(flags, c); !s.ok()) return s;
  if (absl::Status s = AccessFlags(flags, c); !s.ok()) return s;
  if (absl::Status s = TcpDataPortFlag(flags, c); !s.ok()) return s;
  return c;
}

}  // namespace ps::server
