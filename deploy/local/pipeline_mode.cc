#include "deploy/local/pipeline_mode.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "deploy/local/allreduce_mode.h"
#include "worker/nn/model_description.h"
#include "worker/nn/stage_split.h"
#include "worker/pipeline/memory_budget.h"
#include "worker/pipeline/pipeline_place.h"
#include "worker/pipeline/schedule_action.h"

namespace ps {

absl::Status CheckPipelineConfig(const LaunchConfig& config) {
  const int k = config.pipeline_stages;
  const int m = config.micro_batches;
  if (k < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--pipeline_stages=%d: must be at least 1", k));
  }
  if (config.num_workers % k != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--num_workers=%d is not a multiple of --pipeline_stages=%d: the "
        "job runs replicas x stages workers (e.g. --num_workers=%d for 2 "
        "replicas)",
        config.num_workers, k, 2 * k));
  }
  if (m < 1 || m > config.batch_size || config.batch_size % m != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--micro_batches=%d must be in [1, --batch_size=%d] and divide it", m,
        config.batch_size));
  }
  if (m > 1 && k == 1) {
    return absl::InvalidArgumentError(
        "--micro_batches needs --pipeline_stages above 1");
  }
  if (config.worker_memory_budget != "0") {
    absl::StatusOr<int64_t> budget =
        worker::pipeline::ParseByteSize(config.worker_memory_budget);
    if (!budget.ok()) return budget.status();
    if (!config.program.empty()) {
      return absl::InvalidArgumentError(
          "--worker_memory_budget is our worker's: a program after -- "
          "counts its own memory");
    }
    // The workers' own check, before any process starts.
    absl::StatusOr<worker::nn::ModelDescription> model =
        worker::nn::ModelDescription::FromFlag(config.model);
    if (model.ok()) {
      absl::StatusOr<worker::nn::StageSplitKind> split =
          worker::nn::ParseStageSplit(config.stage_split);
      if (!split.ok()) return split.status();
      absl::StatusOr<worker::pipeline::ScheduleKind> schedule =
          worker::pipeline::ParseScheduleKind(config.pipeline_schedule);
      if (!schedule.ok()) return schedule.status();
      worker::pipeline::MemoryFlags flags;
      flags.stages = k;
      flags.batch_size = config.batch_size;
      flags.micro_batches = m;
      flags.schedule = *schedule;
      // --compression comes in --worker_flags: a top-k worker's residuals
      // are the worker's own check to count.
      absl::Status fits =
          worker::pipeline::CheckMemoryBudget(*model, *split, flags, *budget);
      if (!fits.ok()) return fits;
    }
  }
  if (k > 1 && config.program.empty()) {
    if (absl::Status s =
            worker::pipeline::ParseScheduleKind(config.pipeline_schedule)
                .status();
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            worker::nn::ParseStageSplit(config.stage_split).status();
        !s.ok()) {
      return s;
    }
    // More stages than layers fails here, before any process starts.
    absl::StatusOr<worker::nn::ModelDescription> model =
        worker::nn::ModelDescription::FromFlag(config.model);
    if (model.ok()) {
      if (absl::Status s =
              worker::nn::SplitByParameterBytes(*model, k).status();
          !s.ok()) {
        return s;
      }
    }
  }
  if (k > 1 && config.program.empty() && config.mode == kLaunchAllreduceMode) {
    return absl::InvalidArgumentError(
        "--pipeline_stages needs parameter servers to hold the stages' "
        "parameters, not --mode=allreduce");
  }
  return absl::OkStatus();
}

std::vector<std::string> PipelineWorkerFlags(const LaunchConfig& config) {
  if (config.pipeline_stages == 1) return {};
  return {absl::StrCat("--pipeline_stages=", config.pipeline_stages),
          absl::StrCat("--micro_batches=", config.micro_batches),
          absl::StrCat("--pipeline_schedule=", config.pipeline_schedule),
          absl::StrCat("--stage_split=", config.stage_split)};
}

std::vector<std::pair<std::string, std::string>> PipelineEnvironment(
    const LaunchConfig& config) {
  if (config.pipeline_stages == 1) return {};
  return {{"PS_PIPELINE_STAGES", absl::StrCat(config.pipeline_stages)},
          {"PS_MICRO_BATCHES", absl::StrCat(config.micro_batches)}};
}

int ServerGroups(const LaunchConfig& config) {
  return config.pipeline_stages > 1 && config.program.empty()
             ? config.pipeline_stages
             : 1;
}

int TotalServers(const LaunchConfig& config) {
  return config.num_servers * ServerGroups(config);
}

bool SavesModel(const LaunchConfig& config, int rank) {
  return rank == 0 || (ServerGroups(config) > 1 && rank < ServerGroups(config));
}

ServerGroup ServerGroupOf(const LaunchConfig& config, int index) {
  ServerGroup group;
  group.shards = config.num_servers;
  group.workers = config.num_workers;
  group.job_id = config.job_id;
  group.checkpoint_dir = config.checkpoint_dir;
  group.shard = index;
  const int groups = ServerGroups(config);
  if (groups == 1) return group;
  group.stage = index / config.num_servers;
  group.shard = index % config.num_servers;
  group.workers = config.num_workers / groups;
  group.job_id = worker::pipeline::StageGroupJobId(config.job_id, group.stage);
  if (!config.checkpoint_dir.empty()) {
    group.checkpoint_dir =
        StageCheckpointDir(config.checkpoint_dir, group.stage);
  }
  return group;
}

std::string StageCheckpointDir(const std::string& checkpoint_dir, int stage) {
  return absl::StrCat(checkpoint_dir, "/stage", stage);
}

}  // namespace ps
