#include "worker/pipeline/stage_run.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/initializer.h"
#include "spdlog/spdlog.h"
#include "worker/pipeline/memory_budget.h"

namespace ps::worker::pipeline {
namespace {

// How long a stage waits for a neighbour that neither sends nor closes the
// link: a neighbour that dies closes it at once, but replica 0 evaluating
// at an epoch's end keeps the other replicas' stages waiting.
constexpr absl::Duration kLinkIdleTimeout = absl::Minutes(30);

// What sizes a worker's memory besides its model (memory_budget.h).
absl::StatusOr<MemoryFlags> MemoryFlagsOf(const WorkerConfig& config) {
  absl::StatusOr<ScheduleKind> schedule =
      ParseScheduleKind(config.pipeline_schedule);
  if (!schedule.ok()) return schedule.status();
  MemoryFlags flags;
  flags.stages = config.pipeline_stages;
  flags.batch_size = config.batch_size;
  flags.micro_batches = config.micro_batches;
  flags.schedule = *schedule;
  flags.topk = config.compression == "topk";
  return flags;
}

LinkRoutes RoutesOf(const WorkerConfig& config) {
  return {config.stage_link_listen, config.stage_link_previous,
          config.stage_link_secret};
}

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
  if (absl::Status s = ParseByteSize(config.worker_memory_budget).status();
      !s.ok()) {
    return s;
  }
  const LinkRoutes routes = RoutesOf(config);
  if (config.pipeline_stages == 1) {
    if (config.micro_batches != 1 || routes.any_tcp()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config.micro_batches != 1 ? "--micro_batches"
                                                 : "--stage_link_listen and "
                                                   "--stage_link_previous",
                       " need --pipeline_stages above 1"));
    }
    return absl::OkStatus();
  }
  if (config.local || config.mode == kAllreduceMode) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pipeline_stages needs parameter servers, not ",
                     config.local ? "--local" : "--mode=allreduce"));
  }
  absl::StatusOr<PipelinePlace> place =
      PipelinePlace::FromRank(rank, config.num_workers, config.pipeline_stages);
  if (!place.ok()) return place.status();
  return CheckLinkRoutes(routes, *place, !config.tls_ca.empty());
}

absl::Status CheckWorkerMemory(const WorkerConfig& config,
                               const nn::ModelDescription& description) {
  absl::StatusOr<int64_t> budget = ParseByteSize(config.worker_memory_budget);
  if (!budget.ok()) return budget.status();
  absl::StatusOr<nn::StageSplitKind> split =
      nn::ParseStageSplit(config.stage_split);
  if (!split.ok()) return split.status();
  absl::StatusOr<MemoryFlags> flags = MemoryFlagsOf(config);
  if (!flags.ok()) return flags.status();
  return CheckMemoryBudget(description, *split, *flags, *budget);
}

bool EvaluatesTestSet(const WorkerConfig& config, int rank) {
  if (config.pipeline_stages <= 1) return rank == 0;
  absl::StatusOr<PipelinePlace> place =
      PipelinePlace::FromRank(rank, config.num_workers, config.pipeline_stages);
  return place.ok() && place->replica == 0;
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
  absl::StatusOr<MemoryFlags> flags = MemoryFlagsOf(config);
  if (!flags.ok()) return flags.status();
  auto run = absl::WrapUnique(new StageRun());
  run->place_ = *place;
  run->ranges_ = *std::move(ranges);
  nn::ModelOptions options;
  // The schedule runs a micro-batch at a time: the layers hold its rows.
  options.max_batch = RowsPerMicroBatch(
      config.pipeline_stages, config.batch_size, config.micro_batches);
  options.seed = config.seed;
  const nn::StageRange& mine = run->ranges_[place->stage];
  run->counted_ = std::make_unique<CountingBackend>(backend);
  absl::StatusOr<std::unique_ptr<nn::StageModel>> stage =
      nn::StageModel::Create(description, mine, options, run->counted_.get());
  if (!stage.ok()) return stage.status();
  run->stage_ = *std::move(stage);
  run->memory_ = CountedMemory(description, *run->stage_, place->stage, *flags,
                               *run->counted_);
  const WorkerMemory& m = run->memory_;
  spdlog::info(
      "pipeline {}: tensor memory {} ({} on the backend, {} host copies, {} "
      "pulled weights, {} schedule buffers, {} convolution scratch, {} "
      "top-k residuals)",
      place->ToString(), FormatBytes(m.total()), m.backend_bytes, m.host_bytes,
      m.pulled_bytes, m.schedule_bytes, m.scratch_bytes, m.compression_bytes);
  run->whole_spec_ = description.Spec(config.seed);
  run->stage_spec_.seed = config.seed;
  for (int t = mine.first_tensor; t < mine.end_tensor; ++t) {
    TensorSpec tensor = run->whole_spec_.tensors[t];
    tensor.initializer = InitializerSpec::FromRank0();
    run->stage_spec_.tensors.push_back(std::move(tensor));
  }
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
      config.retry_timeout, std::max(config.retry_timeout, kLinkIdleTimeout),
      RoutesOf(config));
  if (!neighbours.ok()) return neighbours.status();
  neighbours_ = *std::move(neighbours);
  return absl::OkStatus();
}

absl::Status StageRun::UseStageGroup(ClientOptions* options) const {
  absl::StatusOr<std::vector<std::string>> servers =
      StageGroupServers(options->servers, place_.stages, place_.stage);
  if (!servers.ok()) return servers.status();
  options->servers = *std::move(servers);
  options->job_id = StageGroupJobId(options->job_id, place_.stage);
  options->rank = place_.replica;
  return absl::OkStatus();
}

absl::Status StageRun::MakeTrainer(const WorkerConfig& config,
                                   WeightExchange* weights,
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
  options.evaluate = place_.replica == 0;
  options.save_model_path = place_.replica == 0 ? config.save_model : "";
  options.whole_spec = whole_spec_;
  absl::StatusOr<KillPoint> kill_point =
      KillPoint::Parse(config.test_kill_self);
  if (!kill_point.ok()) return kill_point.status();
  options.kill_point = *kill_point;
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> trainer =
      PipelineTrainer::Create(options, weights, stage_.get(), &neighbours_,
                              train, test);
  if (!trainer.ok()) return trainer.status();
  trainer_ = *std::move(trainer);
  return absl::OkStatus();
}

absl::StatusOr<Registration> StageRun::Declare(ParameterClient* client,
                                               uint64_t planned_steps,
                                               uint32_t batch_size) {
  absl::StatusOr<Registration> registration =
      client->Declare(stage_spec_, planned_steps, batch_size);
  if (!registration.ok() || registration->next_step != 0) return registration;
  // A new job (a restarted rank or a restored group goes on from the
  // servers' weights). Broadcast is collective over the group's replicas.
  TensorValues values(stage_spec_.tensors.size());
  if (place_.replica == 0) {
    const int first = ranges_[place_.stage].first_tensor;
    for (size_t i = 0; i < values.size(); ++i) {
      values[i].resize(stage_spec_.tensors[i].num_elements());
      InitializeSlice(whole_spec_, first + static_cast<uint32_t>(i), 0,
                      absl::MakeSpan(values[i]));
    }
  }
  if (absl::Status s = client->Broadcast(values); !s.ok()) return s;
  return registration;
}

}  // namespace ps::worker::pipeline
