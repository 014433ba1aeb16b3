#include "server/startup_summary.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/consistency_mode.h"
#include "common/cpu_affinity.h"
#include "server/failure_policy.h"
#include "spdlog/fmt/fmt.h"
#include "update/lr_schedule.h"

namespace ps::server {

std::vector<std::string> StartupSummary(const ServerConfig& config,
                                        const ServingFacts& facts) {
  // fmt, as spdlog formats: floats read as in the rest of the log (the
  // shortest exact form, where absl::StrCat keeps 6 digits).
  const CoordinatorOptions& c = config.coordinator;
  std::vector<std::string> lines;
  lines.push_back(fmt::format(
      "listening on {} (port {}), shard {} of {}, mode {}{}, {} workers, "
      "optimizer {} (unless declared), CPUs {}, job \"{}\"; {}",
      config.address, facts.port, config.server_index, config.num_servers,
      std::string(ConsistencyModeName(c.mode)),
      c.mode == ConsistencyMode::kSsp ? absl::StrCat(" staleness ", c.staleness)
                                      : "",
      c.num_workers, std::string(OptimizerKindName(config.optimizer.kind)),
      config.cpus.empty() ? "any" : FormatCpuList(config.cpus), config.job_id,
      facts.restored_slices.has_value()
          ? absl::StrCat("holds ", *facts.restored_slices,
                         " slices of the restored model")
          : absl::StrCat("waiting for rank 0 to declare the model (at most ",
                         config.limits.max_tensors, " tensors, ",
                         config.limits.max_model_bytes >> 20, " MiB)")));
  lines.push_back(fmt::format(
      "connections: {}{}; health checks {}", config.auth.Describe(),
      facts.local_transport ? ", and workers on this host over a Unix socket"
                            : "",
      facts.health_port > 0 ? absl::StrCat("also on port ", facts.health_port,
                                           " (plaintext, health only)")
                            : std::string("on the same port")));
  lines.push_back(fmt::format(
      "workers are dead after {} without a request (--on_worker_failure={}); "
      "learning rate {} {}; checkpoints {}",
      absl::FormatDuration(c.worker_timeout),
      std::string(FailurePolicyName(c.on_worker_failure)),
      std::string(update::LrScheduleName(c.lr_schedule->kind())),
      config.optimizer.learning_rate,
      config.checkpoints.has_value()
          ? absl::StrCat("in ", config.checkpoints->dir, " every ",
                         config.checkpoints->every_updates, " updates / ",
                         absl::FormatDuration(config.checkpoints->every))
          : std::string("off")));
  return lines;
}

}  // namespace ps::server
