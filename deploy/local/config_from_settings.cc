#include "deploy/local/config_from_settings.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "deploy/local/allreduce_mode.h"
#include "deploy/local/binary_locator.h"

namespace ps {
namespace {

// Resolves a binary flag: the user's path, or the sibling build output.
absl::StatusOr<std::string> BinaryFromFlag(const LauncherLocation& location,
                                           const std::string& cwd,
                                           absl::string_view flag_name,
                                           const std::string& value,
                                           absl::string_view workspace_path,
                                           absl::string_view target) {
  if (value.empty()) {
    return FindSiblingBinary(location, workspace_path, target, flag_name);
  }
  std::string path = ResolveUserPath(value, cwd);
  if (absl::Status status = CheckExecutable(flag_name, path); !status.ok()) {
    return status;
  }
  return path;
}

// Flags that configure our worker binary, which a program given after "--"
// does not read.
constexpr const char* kWorkerBinaryFlags[] = {
    "model",      "seed",       "epochs",       "batch_size",    "data_dir",
    "device",     "save_model", "worker_flags", "worker_binary", "log_every",
    "eval_every", "max_steps",  "retry_timeout"};

absl::Status CheckNoWorkerBinaryFlags(const RunSettings& settings) {
  for (const char* name : kWorkerBinaryFlags) {
    // Set to something else than its default: a value that would be
    // silently ignored.
    if (settings.Changed(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name,
          " configures our worker binary; a program given after -- reads "
          "its own arguments (and PS_RANK, PS_SERVERS, ... from its "
          "environment)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LaunchConfig> ConfigFromSettings(
    const RunSettings& settings, const LauncherLocation& location,
    const std::string& cwd, std::vector<std::string> program,
    const std::string& run_dir) {
  LaunchConfig config;
  config.num_servers = settings.Get<int>("num_servers");
  config.num_workers = settings.Get<int>("num_workers");
  config.model = settings.Text("model");
  config.epochs = settings.Get<int>("epochs");
  config.batch_size = settings.Get<int>("batch_size");
  config.mode = settings.Text("mode");
  config.staleness = settings.Get<int>("staleness");
  config.optimizer = settings.Text("optimizer");
  config.learning_rate = settings.Get<double>("learning_rate");
  config.lr_schedule = settings.Text("lr_schedule");
  if (settings.Get<bool>("checkpoints")) {
    config.checkpoint_dir =
        settings.Text("checkpoint_dir").empty()
            ? absl::StrCat(run_dir, "/checkpoints")
            : ResolveUserPath(settings.Text("checkpoint_dir"), cwd);
  } else if (!settings.Text("checkpoint_dir").empty()) {
    return absl::InvalidArgumentError(
        "--checkpoint_dir with --nocheckpoints: choose one");
  }
  config.run_dir = run_dir;
  config.seed = settings.Get<int64_t>("seed");
  config.job_id = settings.Text("job_id");
  if (config.job_id.empty()) {
    absl::BitGen gen;
    config.job_id = absl::StrFormat("launch-%d-%08x", getpid(),
                                    absl::Uniform<uint32_t>(gen));
  }
  config.data_dir = ResolveUserPath(settings.Text("data_dir"), cwd);
  config.device = settings.Text("device");
  config.save_model = ResolveUserPath(settings.Text("save_model"), cwd);
  config.log_every = settings.Get<int>("log_every");
  config.eval_every = settings.Get<int>("eval_every");
  config.max_steps = settings.Get<int64_t>("max_steps");
  // Settings made by hand (tests) may leave them out: one stage.
  if (settings.Has("pipeline_stages")) {
    config.pipeline_stages = settings.Get<int>("pipeline_stages");
    config.micro_batches = settings.Get<int>("micro_batches");
  }
  if (settings.Has("worker_memory_budget")) {
    config.worker_memory_budget = settings.Text("worker_memory_budget");
  }
  config.retry_timeout = settings.Get<absl::Duration>("retry_timeout");
  config.metrics_port_base = settings.Get<int>("metrics_port_base");
  config.base_port = settings.Get<int>("base_port");
  config.startup_timeout = settings.Get<absl::Duration>("startup_timeout");
  config.shutdown_timeout = settings.Get<absl::Duration>("shutdown_timeout");
  config.kill_grace = settings.Get<absl::Duration>("kill_grace");
  config.max_restarts = settings.Get<int>("max_restarts");
  config.restart_backoff = settings.Get<absl::Duration>("restart_backoff");
  absl::StatusOr<AuthMode> auth = ParseAuthMode(settings.Text("auth"));
  if (!auth.ok()) return auth.status();
  const bool with_auth = *auth != AuthMode::kNone;
  absl::StatusOr<std::vector<std::string>> server_flags =
      ParseExtraFlags("server_flags", settings.Text("server_flags"),
                      ReservedServerFlags(with_auth));
  if (!server_flags.ok()) return server_flags.status();
  config.extra_server_flags = *std::move(server_flags);
  absl::StatusOr<std::vector<std::string>> worker_flags =
      ParseExtraFlags("worker_flags", settings.Text("worker_flags"),
                      ReservedWorkerFlags(with_auth));
  if (!worker_flags.ok()) return worker_flags.status();
  config.extra_worker_flags = *std::move(worker_flags);
  config.program = std::move(program);
  const std::string output = settings.Text("output");
  if (output != "auto" && output != "progress" && output != "stream") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--output must be one of auto|progress|stream, got '", output, "'"));
  }
  if (settings.Get<absl::Duration>("progress_interval") <=
      absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--progress_interval must be positive");
  }

  absl::StatusOr<std::string> server = BinaryFromFlag(
      location, cwd, "server_binary", settings.Text("server_binary"),
      "server/server", "//server:server");
  if (!server.ok()) return server.status();
  config.server_binary = *server;
  if (IsAllreduce(config)) {
    // Found beside the server binary; checked now rather than failing as
    // the job starts.
    const std::string coordinator = CoordinatorBinary(config.server_binary);
    if (!CheckExecutable("server_binary", coordinator).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--mode=allreduce starts the coordinator ", coordinator,
          " (beside --server_binary's folder), which is not an executable "
          "file: build it with `bazel build //allreduce:coordinator`"));
    }
  }
  if (!config.program.empty()) {
    if (absl::Status status = CheckNoWorkerBinaryFlags(settings);
        !status.ok()) {
      return status;
    }
    if (absl::Status status = ValidateLaunchConfig(config); !status.ok()) {
      return status;
    }
    return config;
  }
  absl::StatusOr<std::string> worker = BinaryFromFlag(
      location, cwd, "worker_binary", settings.Text("worker_binary"),
      "worker/worker", "//worker:worker");
  if (!worker.ok()) return worker.status();
  config.worker_binary = *worker;

  if (absl::Status status = ValidateLaunchConfig(config); !status.ok()) {
    return status;
  }
  struct stat info;
  if (stat(config.data_dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data_dir=", config.data_dir, " is not a directory"));
  }
  return config;
}

}  // namespace ps
