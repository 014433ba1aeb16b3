#include "worker/pipeline/stage_run.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/consistency_mode.h"
#include "spdlog/spdlog.h"

namespace ps::worker::pipeline {
namespace {

// How long a stage waits for a neighbour that neither sends nor closes the
// link: a neighbour that dies closes it at once, but rank 0 evaluating the
// whole model at an epoch's end keeps the others of its replica waiting.
constexpr absl::Duration kLinkIdleTimeout = absl::Minutes(30);

}  // namespace

absl::Status CheckPipelineConfig(const WorkerConfig& config, int rank) {
  if (config.pipeline_stages < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--pipeline_stages=%d: must be at least 1", config.pipeline_stages));
  }
  if (config.micro_batches < 1 || config.micro_batches > config.batch_size ||
      config.batch_size % config.micro_batches != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--micro_batches=%d must be in [1, --batch_size=%d] and divide it",
        config.micro_batches, config.batch_size));
  }
  if (absl::Status s = ParseScheduleKind(config.pipeline_schedule).status();
      !s.ok()) {
    return s;
  }
  if (absl::Status s = nn::ParseStageSplit(config.stage_split).status();
      !s.ok()) {
    return s;
  }
  if (config.pipeline_stages == 1) {
    if (config.micro_batches != 1) {
      return absl::InvalidArgumentError(
          "--micro_batches needs --pipeline_stages above 1");
    }
    return absl::OkStatus();
  }
  if (config.local || config.mode == kAllreduceMode) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pipeline_stages needs parameter servers, not ",
                     config.local ? "--local" : "--mode=allreduce"));
  }
  if (!config.mode.empty() && config.mode != "sync") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pipeline_stages needs --mode=sync, not --mode=", config.mode,
        ": each stage pushes zeros for the other stages' tensors, which a "
        "sync step averages away and an ssp or async push would apply"));
  }
  return PipelinePlace::FromRank(rank, config.num_workers,
                                 config.pipeline_stages)
      .status();
}

absl::StatusOr<std::unique_ptr<StageRun>> StageRun::Create(
    const WorkerConfig& config, int rank,
    const nn::ModelDescription& description, kernels::Backend* backend) {
  absl::StatusOr<PipelinePlace> place =
      PipelinePlace::FromRank(rank, config.num_workers, config.pipeline_stages);
  if (!place.ok()) return place.status();
  absl::StatusOr<nn::StageSplitKind> split =
      nn::ParseStageSplit(config.stage_split);
  if (!split.ok()) return split.status();
  absl::StatusOr<std::vector<nn::StageRange>> ranges =
      nn::SplitStages(description, config.pipeline_stages, *split);
  if (!ranges.ok()) return ranges.status();
  auto run = absl::WrapUnique(new StageRun());
  run->place_ = *place;
  run->ranges_ = *std::move(ranges);
  nn::ModelOptions options;
  options.max_batch = config.batch_size;
  options.seed = config.seed;
  const nn::StageRange& mine = run->ranges_[place->stage];
  absl::StatusOr<std::unique_ptr<nn::StageModel>> stage =
      nn::StageModel::Create(description, mine, options, backend);
  if (!stage.ok()) return stage.status();
  run->stage_ = *std::move(stage);
  if (rank == 0) {
    for (size_t s = 0; s < run->ranges_.size(); ++s) {
      spdlog::info("pipeline stage {} (split by {}): {}", s,
                   nn::StageSplitName(*split),
                   run->ranges_[s].ToString(description));
    }
  }
  return run;
}

absl::Status StageRun::ConnectNeighbours(const WorkerConfig& config) {
  absl::StatusOr<Neighbours> neighbours = pipeline::ConnectNeighbours(
      place_, JobKey(config.job_id, config.servers + config.server_pattern),
      config.retry_timeout, std::max(config.retry_timeout, kLinkIdleTimeout));
  if (!neighbours.ok()) return neighbours.status();
  neighbours_ = *std::move(neighbours);
  return absl::OkStatus();
}

absl::Status StageRun::MakeTrainer(const WorkerConfig& config,
                                   WeightExchange* weights, nn::Model* whole,
                                   const LabeledImages* train,
                                   const LabeledImages* test) {
  PipelineTrainerOptions options;
  options.place = place_;
  options.batch_size = config.batch_size;
  options.micro_batches = config.micro_batches;
  absl::StatusOr<ScheduleKind> schedule =
      ParseScheduleKind(config.pipeline_schedule);
  if (!schedule.ok()) return schedule.status();
  options.schedule = *schedule;
  options.epochs = config.epochs;
  options.seed = config.seed;
  options.max_steps = config.max_steps;
  options.log_every = config.log_every;
  options.evaluate = place_.rank() == 0;
  options.save_model_path = place_.rank() == 0 ? config.save_model : "";
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> trainer =
      PipelineTrainer::Create(options, weights, stage_.get(), &neighbours_,
                              whole, train, test);
  if (!trainer.ok()) return trainer.status();
  trainer_ = *std::move(trainer);
  return absl::OkStatus();
}

absl::Status StageRun::CheckMode(const Registration& registration) {
  if (registration.mode != ConsistencyMode::kSync) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--pipeline_stages needs the servers in sync mode; they run ",
        ConsistencyModeName(registration.mode)));
  }
  return absl::OkStatus();
}

}  // namespace ps::worker::pipeline
