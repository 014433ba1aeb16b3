#include "deploy/local/launch_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cluster_address.h"
#include "common/consistency_mode.h"
#include "common/flag_range.h"
#include "common/model_spec.h"
#include "common/worker_environment.h"
#include "deploy/local/allreduce_mode.h"
#include "deploy/local/pipeline_mode.h"
#include "deploy/local/run_directory.h"
#include "worker/nn/model_description.h"
#include "worker/pipeline/link_routes.h"

namespace ps {
namespace {

// Large enough for any machine this runs on, small enough to catch typos.
constexpr int kMaxProcesses = 256;

absl::Status CheckOneOf(absl::string_view flag, const std::string& value,
                        std::initializer_list<absl::string_view> allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be one of ",
                                                 absl::StrJoin(allowed, "|"),
                                                 ", got '", value, "'"));
}

absl::Status CheckPositive(absl::string_view flag, absl::Duration value) {
  if (value <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, " must be positive, got ", absl::FormatDuration(value)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateLaunchConfig(const LaunchConfig& config) {
  for (absl::Status status : {
           CheckFlagRange("num_servers", config.num_servers, 1, kMaxProcesses),
           CheckFlagRange("num_workers", config.num_workers, 1, kMaxProcesses),
           CheckFlagRange("epochs", config.epochs, 1, 100000),
           CheckFlagRange("batch_size", config.batch_size, 1, 1 << 20),
           CheckOneOf("mode", config.mode,
                      {"sync", "ssp", "async", kLaunchAllreduceMode}),
           CheckOneOf("optimizer", config.optimizer, {"", "adam", "sgd"}),
           CheckFlagRange("seed", config.seed, 0, INT64_MAX),
           CheckOneOf("device", config.device, {"auto", "cpu", "cuda"}),
           CheckPositive("startup_timeout", config.startup_timeout),
           CheckPositive("shutdown_timeout", config.shutdown_timeout),
           CheckPositive("kill_grace", config.kill_grace),
           CheckFlagRange("log_every", config.log_every, 1, 1 << 30),
           CheckFlagRange("eval_every", config.eval_every, 0, 1 << 30),
           CheckFlagRange("max_steps", config.max_steps, 0, INT64_MAX),
           CheckPositive("retry_timeout", config.retry_timeout),
           CheckFlagRange("max_restarts", config.max_restarts, 0, 1000),
           CheckPositive("restart_backoff", config.restart_backoff),
       }) {
    if (!status.ok()) return status;
  }
  // Checked here too, so that a bad description fails before any process
  // starts.
  if (absl::StatusOr<worker::nn::ModelDescription> model =
          worker::nn::ModelDescription::FromFlag(config.model);
      !model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model: ", model.status().message()));
  }
  if (absl::Status status = CheckPipelineConfig(config); !status.ok()) {
    return status;
  }
  // The mode parses: CheckOneOf above.
  if (absl::Status status =
          IsAllreduce(config)
              ? CheckAllreduceConfig(config)
              : CheckStaleness(*ParseConsistencyMode(config.mode),
                               config.staleness);
      !status.ok()) {
    return status;
  }
  if (config.metrics_port_base != 0) {
    const int last = TotalServers(config) + config.num_workers - 1;
    absl::Status status = CheckFlagRange(
        "metrics_port_base", config.metrics_port_base, 1, 65535 - last);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(status.message(), " (0: no metrics; it needs ", last + 1,
                       " ports, one a process)"));
    }
  }
  if (config.lr_schedule != "constant" && config.lr_schedule != "cosine") {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr_schedule must be constant or cosine, got \"",
                     config.lr_schedule, "\""));
  }
  if (!std::isfinite(config.learning_rate) || config.learning_rate < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--learning_rate must be a finite number >= 0 (0: the server's "
        "default), got ",
        config.learning_rate));
  }
  if (config.base_port != 0) {
    absl::Status status = CheckFlagRange("base_port", config.base_port, 1,
                                         65536 - TotalServers(config));
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(status.message(),
                       " (0 picks free ports; servers use base_port + "
                       "index)"));
    }
  }
  if (config.data_dir.empty()) {
    return absl::InvalidArgumentError("--data_dir must not be empty");
  }
  if (absl::Status s = ValidateJobId(config.job_id); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--job_id: ", s.message()));
  }
  if (config.server_binary.empty()) {
    return absl::InvalidArgumentError("--server_binary must not be empty");
  }
  if (config.program.empty() && config.worker_binary.empty()) {
    return absl::InvalidArgumentError(
        "--worker_binary must not be empty (or give a program after --)");
  }
  if (!config.program.empty() && config.program.front().empty()) {
    return absl::InvalidArgumentError("the program after -- has no name");
  }
  return absl::OkStatus();
}

std::vector<std::string> LaunchConfigWarnings(const LaunchConfig& config) {
  std::vector<std::string> warnings;
  if (config.program.empty() &&
      config.data_dir.find("fashion-mnist") != std::string::npos) {
    const int share = kTrainingExamples / config.num_workers;
    if (config.batch_size > share) {
      warnings.push_back(
          absl::StrCat("--batch_size=", config.batch_size,
                       " is larger than a worker's "
                       "share of the ",
                       kTrainingExamples, " training examples (", share,
                       " with --num_workers=", config.num_workers,
                       "): every step is one partial batch"));
    }
  }
  return warnings;
}

int ServerMetricsPort(const LaunchConfig& config, int index) {
  return config.metrics_port_base == 0 ? 0 : config.metrics_port_base + index;
}

int WorkerMetricsPort(const LaunchConfig& config, int rank) {
  return config.metrics_port_base == 0
             ? 0
             : config.metrics_port_base + TotalServers(config) + rank;
}

std::string MetricsPortsLine(const LaunchConfig& config) {
  auto range = [](int first, int last) {
    return first == last ? absl::StrCat(first) : absl::StrCat(first, "-", last);
  };
  std::string line =
      absl::StrCat("metrics at http://127.0.0.1:PORT/metrics: servers on ",
                   range(ServerMetricsPort(config, 0),
                         ServerMetricsPort(config, TotalServers(config) - 1)));
  if (config.program.empty()) {
    absl::StrAppend(&line, ", workers on ",
                    range(WorkerMetricsPort(config, 0),
                          WorkerMetricsPort(config, config.num_workers - 1)));
  } else {
    absl::StrAppend(&line, " (a program's workers serve none)");
  }
  return line;
}

std::vector<std::string> ReservedServerFlags(bool auth) {
  std::vector<std::string> flags = {
      "server_index", "num_servers", "num_workers", "port",
      "host",         "port_file",   "lr_schedule", "checkpoint_dir",
      "restore",      "extend",      "job_id",      "metrics_port"};
  if (auth) {
    flags.insert(flags.end(),
                 {"tls_cert", "tls_key", "tls_client_ca", "token_file"});
  }
  return flags;
}

std::vector<std::string> ReservedWorkerFlags(bool auth) {
  std::vector<std::string> flags = {"rank",
                                    "num_workers",
                                    "servers",
                                    "job_id",
                                    "log_every",
                                    "eval_every",
                                    "max_steps",
                                    "retry_timeout",
                                    "metrics_port",
                                    "pipeline_stages",
                                    "micro_batches",
                                    "pipeline_schedule",
                                    "stage_split",
                                    "worker_memory_budget",
                                    "stage_link_listen",
                                    "stage_link_previous"};
  if (auth) {
    flags.insert(flags.end(), {"tls_ca", "tls_cert", "tls_key",
                               "tls_server_name", "token_file"});
  }
  return flags;
}

absl::StatusOr<std::vector<std::string>> ParseExtraFlags(
    absl::string_view flag_name, absl::string_view text,
    const std::vector<std::string>& reserved) {
  std::vector<std::string> flags =
      absl::StrSplit(text, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  for (const std::string& flag : flags) {
    const bool dashes = absl::StartsWith(flag, "--");
    const absl::string_view name =
        dashes ? absl::string_view(flag).substr(2, flag.find('=') - 2) : "";
    if (name.empty() || absl::StartsWith(name, "-")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag_name, ": '", flag, "' is not a --name[=value] flag"));
    }
    if (std::find(reserved.begin(), reserved.end(), name) != reserved.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag_name, " must not set --", name,
                       ": the launcher sets it (see its --help)"));
    }
  }
  return flags;
}

std::vector<std::string> ServerArgv(const LaunchConfig& config, int index,
                                    const std::string& port_file, int port) {
  if (IsAllreduce(config)) return CoordinatorArgv(config, port_file, port);
  if (port == 0 && config.base_port != 0) port = config.base_port + index;
  // Its stage's group with stages; else the job's one.
  const ServerGroup group = ServerGroupOf(config, index);
  std::vector<std::string> argv = {
      config.server_binary,
      absl::StrCat("--server_index=", group.shard),
      absl::StrCat("--num_servers=", group.shards),
      absl::StrCat("--num_workers=", group.workers),
      absl::StrCat("--port=", port),
      absl::StrCat("--host=", config.server_host),
      absl::StrCat("--port_file=", port_file),
      absl::StrCat("--mode=", config.mode),
      absl::StrCat("--staleness=", config.staleness),
  };
  if (!config.optimizer.empty()) {
    argv.push_back(absl::StrCat("--optimizer=", config.optimizer));
  }
  if (config.learning_rate > 0) {
    argv.push_back(absl::StrCat("--learning_rate=", config.learning_rate));
  }
  if (!group.job_id.empty()) {
    argv.push_back(absl::StrCat("--job_id=", group.job_id));
  }
  argv.push_back(absl::StrCat("--lr_schedule=", config.lr_schedule));
  if (const int metrics = ServerMetricsPort(config, index); metrics != 0) {
    argv.push_back(absl::StrCat("--metrics_port=", metrics));
  }
  const AuthFiles& auth = config.auth;
  if (auth.tls()) {
    argv.push_back(absl::StrCat("--tls_cert=", auth.server_cert));
    argv.push_back(absl::StrCat("--tls_key=", auth.server_key));
    if (auth.mtls()) {
      argv.push_back(absl::StrCat("--tls_client_ca=", auth.ca_cert));
    }
    if (!auth.token.empty()) {
      argv.push_back(absl::StrCat("--token_file=", auth.token));
    }
  }
  if (!group.checkpoint_dir.empty()) {
    // --restore on every start: a restarted server resumes; a first start
    // with no checkpoint yet starts fresh.
    argv.push_back(absl::StrCat("--checkpoint_dir=", group.checkpoint_dir));
    argv.push_back("--restore");
    if (config.extend) argv.push_back("--extend");
  }
  if (!config.run_dir.empty()) {
    argv.push_back(absl::StrCat("--report_file=",
                                ServerReportFile(config.run_dir, index)));
  }
  argv.insert(argv.end(), config.extra_server_flags.begin(),
              config.extra_server_flags.end());
  return argv;
}

std::vector<std::string> WorkerArgv(const LaunchConfig& config, int rank,
                                    const std::vector<std::string>& servers) {
  if (!config.program.empty()) return config.program;
  std::vector<std::string> argv = {
      config.worker_binary,
      absl::StrCat("--rank=", rank),
      absl::StrCat("--local_rank=", rank - config.first_rank),
      absl::StrCat("--num_workers=", config.num_workers),
      absl::StrCat("--servers=", absl::StrJoin(servers, ",")),
      absl::StrCat("--model=", config.model),
      absl::StrCat("--batch_size=", config.batch_size),
      absl::StrCat("--epochs=", config.epochs),
      absl::StrCat("--seed=", config.seed),
      absl::StrCat("--data_dir=", config.data_dir),
      absl::StrCat("--device=", config.device),
      absl::StrCat("--mode=", config.mode),
  };
  if (SavesModel(config, rank) && !config.save_model.empty()) {
    argv.push_back(absl::StrCat("--save_model=", config.save_model));
  }
  const LaunchConfig worker_defaults;
  if (config.log_every != worker_defaults.log_every) {
    argv.push_back(absl::StrCat("--log_every=", config.log_every));
  }
  if (config.eval_every != worker_defaults.eval_every) {
    argv.push_back(absl::StrCat("--eval_every=", config.eval_every));
  }
  if (config.max_steps != worker_defaults.max_steps) {
    argv.push_back(absl::StrCat("--max_steps=", config.max_steps));
  }
  if (config.retry_timeout != worker_defaults.retry_timeout) {
    argv.push_back(absl::StrCat("--retry_timeout=",
                                absl::FormatDuration(config.retry_timeout)));
  }
  if (const int metrics = WorkerMetricsPort(config, rank); metrics != 0) {
    argv.push_back(absl::StrCat("--metrics_port=", metrics));
  }
  if (!config.job_id.empty()) {
    argv.push_back(absl::StrCat("--job_id=", config.job_id));
  }
  const AuthFiles& auth = config.auth;
  if (auth.tls()) {
    argv.push_back(absl::StrCat("--tls_ca=", auth.ca_cert));
    if (auth.mtls()) {
      argv.push_back(absl::StrCat("--tls_cert=", auth.client_cert));
      argv.push_back(absl::StrCat("--tls_key=", auth.client_key));
    }
    if (!auth.token.empty()) {
      argv.push_back(absl::StrCat("--token_file=", auth.token));
    }
  }
  if (IsAllreduce(config)) {
    for (std::string& flag : AllreduceWorkerFlags(config)) {
      argv.push_back(std::move(flag));
    }
  }
  if (config.worker_memory_budget != "0") {
    argv.push_back(
        absl::StrCat("--worker_memory_budget=", config.worker_memory_budget));
  }
  for (std::string& flag : PipelineWorkerFlags(config)) {
    argv.push_back(std::move(flag));
  }
  if (auto it = config.stage_links.listen.find(rank);
      it != config.stage_links.listen.end()) {
    argv.push_back(absl::StrCat("--stage_link_listen=", it->second));
  }
  if (auto it = config.stage_links.previous.find(rank);
      it != config.stage_links.previous.end()) {
    argv.push_back(absl::StrCat("--stage_link_previous=", it->second));
  }
  argv.insert(argv.end(), config.extra_worker_flags.begin(),
              config.extra_worker_flags.end());
  return argv;
}

std::vector<std::pair<std::string, std::string>> WorkerEnv(
    const LaunchConfig& config, int rank,
    const std::vector<std::string>& servers) {
  WorkerEnvironment environment;
  environment.rank = rank;
  environment.num_workers = config.num_workers;
  environment.local_rank = rank - config.first_rank;
  environment.local_num_workers =
      config.host_workers < 0 ? config.num_workers : config.host_workers;
  environment.servers = servers;
  environment.job_id = config.job_id;
  if (config.auth.tls()) {
    environment.tls_ca_file = config.auth.ca_cert;
    environment.tls_cert_file = config.auth.client_cert;
    environment.tls_key_file = config.auth.client_key;
    environment.token_file = config.auth.token;
  }
  std::vector<std::pair<std::string, std::string>> variables =
      WorkerEnvironmentVariables(environment);
  if (!config.program.empty() && config.program_threads > 0) {
    variables.emplace_back("OMP_NUM_THREADS",
                           absl::StrCat(config.program_threads));
  }
  if (IsAllreduce(config)) {
    for (auto& variable : AllreduceProgramEnvironment(config)) {
      variables.push_back(std::move(variable));
    }
  }
  for (auto& variable : PipelineEnvironment(config)) {
    variables.push_back(std::move(variable));
  }
  // A program's worker serves its metrics where the C++ worker's
  // --metrics_port would (paramserver.torch reads it).
  if (const int metrics = WorkerMetricsPort(config, rank); metrics != 0) {
    variables.emplace_back("PS_METRICS_PORT", absl::StrCat(metrics));
  }
  return variables;
}

ClusterSpec MakeClusterSpec(const LaunchConfig& config) {
  ClusterSpec spec;
  spec.num_servers =
      config.host_servers < 0 ? TotalServers(config) : config.host_servers;
  spec.num_workers =
      config.host_workers < 0 ? config.num_workers : config.host_workers;
  spec.first_server = config.first_server;
  spec.first_rank = config.first_rank;
  spec.server_command = [config](int index, int port,
                                 const std::string& port_file) {
    return ServerArgv(config, index, port_file, port);
  };
  spec.worker_command = [config](int rank,
                                 const std::vector<std::string>& servers) {
    return WorkerArgv(config, rank, servers);
  };
  if (!config.program.empty()) {
    spec.worker_environment =
        [config](int rank, const std::vector<std::string>& servers) {
          return WorkerEnv(config, rank, servers);
        };
    spec.stop_servers_after_workers = true;
  } else if (!config.stage_links.empty()) {
    // In the environment, not on the command line, where `ps` shows it.
    spec.worker_environment = [secret = config.stage_links.secret](
                                  int, const std::vector<std::string>&) {
      return std::vector<std::pair<std::string, std::string>>{
          {worker::pipeline::kStageLinkSecretVariable, secret}};
    };
  }
  spec.host = config.server_host;
  spec.startup_timeout = config.startup_timeout;
  spec.shutdown_timeout = config.shutdown_timeout;
  spec.kill_grace = config.kill_grace;
  spec.max_restarts = config.max_restarts;
  spec.restart_backoff = config.restart_backoff;
  spec.restart_servers = !config.checkpoint_dir.empty();
  if (IsAllreduce(config)) {
    // The coordinator alone, in server 0's place (on host 0 of several):
    // it keeps no state, so it may restart, and it never exits on its own.
    spec.num_servers = config.host_servers < 0 ? 1 : config.host_servers;
    spec.restart_servers = true;
    spec.stop_servers_after_workers = true;
  }
  return spec;
}

}  // namespace ps
