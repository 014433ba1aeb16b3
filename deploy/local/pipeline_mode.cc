#include "deploy/local/pipeline_mode.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/nn/model_description.h"
#include "worker/nn/stage_split.h"
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
  if (k > 1 && config.program.empty() && config.mode != "sync") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pipeline_stages needs --mode=sync, not --mode=", config.mode,
        ": a stage pushes zeros for the other stages' tensors, which only a "
        "sync step averages away"));
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

}  // namespace ps
