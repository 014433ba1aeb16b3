#include "deploy/local/allreduce_mode.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// The servers' flags that the worker takes too in this mode (with --local
// and --mode=allreduce it applies the update itself).
constexpr const char* kUpdateFlags[] = {
    "optimizer", "learning_rate", "momentum",    "weight_decay",     "beta1",
    "beta2",     "epsilon",       "lr_schedule", "min_learning_rate"};

bool IsUpdateFlag(const std::string& flag) {
  const std::string name = flag.substr(2, flag.find('=') - 2);
  return std::find(std::begin(kUpdateFlags), std::end(kUpdateFlags), name) !=
         std::end(kUpdateFlags);
}

}  // namespace

bool IsAllreduce(const LaunchConfig& config) {
  return config.mode == kLaunchAllreduceMode;
}

absl::Status CheckAllreduceConfig(const LaunchConfig& config) {
  if (config.auth.tls()) {
    return absl::InvalidArgumentError(
        "--mode=allreduce runs without TLS (Debian's Gloo has no TLS "
        "transport): leave --auth out");
  }
  if (config.staleness != 0) {
    return absl::InvalidArgumentError(
        "--staleness applies only to --mode=ssp, not --mode=allreduce");
  }
  for (const std::string& flag : config.extra_server_flags) {
    if (!IsUpdateFlag(flag)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--server_flags: ", flag,
          " means nothing with --mode=allreduce (no servers; only the update "
          "flags, which the workers take)"));
    }
  }
  return absl::OkStatus();
}

absl::Status PlaceAllreduceOnHosts(int server_hosts, LaunchConfig* config) {
  if (server_hosts != 0) {
    return absl::InvalidArgumentError(
        "--server_hosts means nothing with --mode=allreduce (no servers: "
        "the coordinator runs on host 0, beside its workers)");
  }
  config->num_servers = 1;
  return absl::OkStatus();
}

std::string CoordinatorBinary(const std::string& server_binary) {
  const std::filesystem::path root =
      std::filesystem::path(server_binary).parent_path().parent_path();
  return (root / "allreduce" / "coordinator").string();
}

std::vector<std::string> CoordinatorArgv(const LaunchConfig& config,
                                         const std::string& port_file,
                                         int port) {
  if (port == 0 && config.base_port != 0) port = config.base_port;
  std::vector<std::string> argv = {
      CoordinatorBinary(config.server_binary),
      absl::StrCat("--num_workers=", config.num_workers),
      absl::StrCat("--port=", port),
      absl::StrCat("--host=", config.server_host),
      absl::StrCat("--port_file=", port_file),
  };
  if (!config.job_id.empty()) {
    argv.push_back(absl::StrCat("--job_id=", config.job_id));
  }
  return argv;
}

std::vector<std::string> AllreduceWorkerFlags(const LaunchConfig& config) {
  std::vector<std::string> flags = {
      absl::StrCat("--allreduce_host=", config.server_host),
      absl::StrCat("--lr_schedule=", config.lr_schedule),
  };
  if (!config.optimizer.empty()) {
    flags.push_back(absl::StrCat("--optimizer=", config.optimizer));
  }
  if (config.learning_rate > 0) {
    flags.push_back(absl::StrCat("--learning_rate=", config.learning_rate));
  }
  for (const std::string& flag : config.extra_server_flags) {
    if (IsUpdateFlag(flag)) flags.push_back(flag);
  }
  if (!config.checkpoint_dir.empty()) {
    // Rank 0 writes there; every rank resumes from what rank 0 reads.
    flags.push_back(absl::StrCat("--checkpoint_dir=", config.checkpoint_dir));
  }
  return flags;
}

std::vector<std::pair<std::string, std::string>> AllreduceProgramEnvironment(
    const LaunchConfig& config) {
  std::vector<std::pair<std::string, std::string>> variables = {
      {"PS_MODE", kLaunchAllreduceMode},
      {"PS_ALLREDUCE_HOST", config.server_host},
  };
  if (!config.checkpoint_dir.empty()) {
    variables.emplace_back("PS_CHECKPOINT_DIR", config.checkpoint_dir);
  }
  return variables;
}

}  // namespace ps
