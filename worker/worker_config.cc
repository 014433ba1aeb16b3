#include "worker/worker_config.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "allreduce/compression.h"
#include "common/auth_files.h"
#include "common/cluster_address.h"
#include "common/consistency_mode.h"
#include "common/flag_range.h"
#include "common/launch_environment.h"
#include "common/metrics_http.h"

namespace ps::worker {
namespace {

// The authentication flags go together as ClientOptions says; their files
// are read now so that an error names the flag.
absl::Status CheckAuthFlags(const WorkerConfig& config) {
  const std::string ca = config.tls_ca;
  const std::string cert = config.tls_cert;
  const std::string key = config.tls_key;
  const std::string token = config.token_file;
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: this worker's certificate and "
        "its private key");
  }
  if (ca.empty()) {
    if (!cert.empty() || !token.empty() || !config.tls_server_name.empty()) {
      return absl::InvalidArgumentError(
          "--tls_cert, --tls_server_name and --token_file need --tls_ca: "
          "the worker checks the servers' certificates with it, and sends a "
          "token only over TLS");
    }
    return absl::OkStatus();
  }
  for (absl::Status s : {
           ReadPemFile("--tls_ca", ca, "CERTIFICATE").status(),
           cert.empty()
               ? absl::OkStatus()
               : ReadPemFile("--tls_cert", cert, "CERTIFICATE").status(),
           key.empty() ? absl::OkStatus()
                       : ReadPemFile("--tls_key", key, "PRIVATE KEY").status(),
           token.empty() ? absl::OkStatus()
                         : ReadTokenFile("--token_file", token).status(),
       }) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RankAndCount> ResolveRank(
    const WorkerConfig& config, bool num_workers_given,
    absl::FunctionRef<const char*(const char*)> lookup) {
  if (config.local_rank < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--local_rank must be -1 (found from the environment) or a rank "
        "among this host's workers (>= 0), got ",
        config.local_rank));
  }
  const auto local_or = [&](int found) {
    return config.local_rank >= 0 ? config.local_rank : found;
  };
  if (config.rank != -1) {
    return RankAndCount{config.rank, config.num_workers, local_or(config.rank)};
  }
  absl::StatusOr<std::optional<LaunchEnvironment>> launch =
      ReadLaunchEnvironment(lookup);
  if (!launch.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank=-1: ", launch.status().message()));
  }
  const char* index = lookup("JOB_COMPLETION_INDEX");
  if (!launch->has_value()) {
    absl::StatusOr<int> rank = RankFromEnv(index);
    if (!rank.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--rank=-1 takes the rank from srun's or mpirun's variables, or "
          "else from $JOB_COMPLETION_INDEX: ",
          rank.status().message()));
    }
    return RankAndCount{*rank, config.num_workers, local_or(0)};
  }
  const LaunchEnvironment& scheduler = **launch;
  const char* name = SchedulerName(scheduler.scheduler);
  if (index != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rank=-1: both $JOB_COMPLETION_INDEX (Kubernetes) and ", name,
        "'s variables are set; unset the one that does not start this "
        "worker"));
  }
  if (num_workers_given && config.num_workers != scheduler.num_tasks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num_workers=", config.num_workers, " but ", name, " started ",
        scheduler.num_tasks,
        " tasks (one worker each): leave --num_workers out under --rank=-1, "
        "or start as many tasks"));
  }
  return RankAndCount{scheduler.rank, scheduler.num_tasks,
                      local_or(scheduler.local_rank)};
}

absl::StatusOr<std::vector<std::string>> ResolveServers(
    const WorkerConfig& config) {
  const std::string list = config.servers;
  const std::string pattern = config.server_pattern;
  if (list.empty() == pattern.empty()) {
    return absl::InvalidArgumentError(
        "give exactly one of --servers and --server_pattern");
  }
  if (!list.empty()) return ParseServerList(list);
  return ExpandServerPattern(pattern, config.num_servers);
}

absl::StatusOr<Compression> CompressionFromConfig(const WorkerConfig& config) {
  absl::StatusOr<Compression> compression =
      Compression::FromName(config.compression, config.topk_ratio);
  if (!compression.ok()) {
    // Its message starts with the argument's name, which is the flag's.
    return absl::InvalidArgumentError(
        absl::StrCat("--", compression.status().message()));
  }
  return compression;
}

absl::Status CheckWorkerConfig(const WorkerConfig& config, int rank) {
  const int num_workers = config.num_workers;
  if (num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_workers must be at least 1, got ", num_workers));
  }
  if (rank < 0 || rank >= num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank must be in [0, ", num_workers, "), got ", rank));
  }
  if (absl::Status s =
          CheckFlagRange("batch_size", config.batch_size, 1, 65536);
      !s.ok()) {
    return s;
  }
  if (config.epochs < 1) {
    return absl::InvalidArgumentError("--epochs must be at least 1");
  }
  if (config.log_every < 1) {
    return absl::InvalidArgumentError("--log_every must be at least 1");
  }
  if (config.eval_every < 0) {
    return absl::InvalidArgumentError("--eval_every must not be negative");
  }
  if (config.slowdown_ms < 0) {
    return absl::InvalidArgumentError("--slowdown_ms must not be negative");
  }
  if (absl::Status s =
          CheckFlagRange("chunk_kb", config.chunk_kb, 1, 32 * 1024);
      !s.ok()) {
    return s;
  }
  if (config.retry_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--retry_timeout must not be negative");
  }
  if (config.heartbeat_period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--heartbeat_period must be positive");
  }
  if (absl::Status s = CompressionFromConfig(config).status(); !s.ok()) {
    return s;
  }
  const std::string mode = config.mode;
  if (mode == kAllreduceMode) {
    if (config.local) {
      return absl::InvalidArgumentError(
          "--local and --mode=allreduce exclude each other");
    }
    if (config.checkpoint_every_steps < 0) {
      return absl::InvalidArgumentError(
          "--checkpoint_every_steps must not be negative");
    }
    if (absl::Status s = CheckFlagRange(
            "allreduce_bucket_kb", config.allreduce_bucket_kb, 1, 1024 * 1024);
        !s.ok()) {
      return s;
    }
    if (config.allreduce_backend != "auto" &&
        config.allreduce_backend != "gloo" &&
        config.allreduce_backend != "nccl") {
      return absl::InvalidArgumentError(
          absl::StrCat("--allreduce_backend=", config.allreduce_backend,
                       " is not auto, gloo or nccl"));
    }
    if (absl::Status s =
            allreduce::ParseCompression(config.allreduce_compression).status();
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--allreduce_compression: ", s.message()));
    }
  } else if (!config.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        "--checkpoint_dir is for --mode=allreduce: elsewhere the servers "
        "checkpoint");
  } else if (!mode.empty()) {
    if (absl::Status s = ParseConsistencyMode(mode).status(); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = ValidateJobId(config.job_id); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--job_id: ", s.message()));
  }
  if (absl::Status s =
          ValidateMetricsFlags(config.metrics_host, config.metrics_port);
      !s.ok()) {
    return s;
  }
  return CheckAuthFlags(config);
}

}  // namespace ps::worker
