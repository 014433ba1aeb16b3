#include "worker/worker_run.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "allreduce/compression.h"
#include "allreduce/join_ring.h"
#include "allreduce/nccl_group.h"
#include "client/parameter_client.h"
#include "common/consistency_mode.h"
#include "common/cpu_affinity.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/metrics_http.h"
#include "common/model_spec.h"
#include "common/progress_line.h"
#include "kernels/device.h"
#include "spdlog/spdlog.h"
#include "update/lr_schedule.h"
#include "update/optimizer.h"
#include "worker/idx_reader.h"
#include "worker/local_exchange.h"
#include "worker/nn/model.h"
#include "worker/nn/model_description.h"
#include "worker/trainer.h"
#include "worker/weight_exchange.h"
#include "worker/worker_metrics.h"

namespace ps::worker {
namespace {

// Errors of calls to the servers: unreachable ones get their own code.
int ServerCallExitCode(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)
             ? kExitServersLost
             : kExitFailed;
}

// Rank 0 writes the model only at the end: find out now, not hours later,
// that it cannot. Creates the directory and a scratch file next to `path`.
absl::Status CheckWritable(const std::string& path) {
  const std::filesystem::path dir =
      std::filesystem::path(path).parent_path().empty()
          ? std::filesystem::path(".")
          : std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat(
        "--save_model: cannot create ", dir.string(), ": ", ec.message()));
  }
  const std::string probe = absl::StrCat(path, ".write-check");
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("--save_model: cannot write in ", dir.string(), ": ",
                     std::strerror(errno)));
  }
  std::fclose(f);
  std::remove(probe.c_str());
  return absl::OkStatus();
}

// The weights of --local, updated as the optimizer flags say.
absl::StatusOr<std::unique_ptr<LocalExchange>> LocalFromConfig(
    const WorkerConfig& config, const ModelSpec& model) {
  absl::StatusOr<OptimizerKind> kind =
      update::ParseOptimizerKind(config.optimizer);
  if (!kind.ok()) return kind.status();
  update::OptimizerConfig optimizer;
  optimizer.kind = *kind;
  optimizer.learning_rate = config.learning_rate;
  optimizer.momentum = config.momentum;
  optimizer.weight_decay = config.weight_decay;
  optimizer.beta1 = config.beta1;
  optimizer.beta2 = config.beta2;
  optimizer.epsilon = config.epsilon;
  absl::StatusOr<update::LrScheduleKind> schedule_kind =
      update::ParseLrSchedule(config.lr_schedule);
  if (!schedule_kind.ok()) return schedule_kind.status();
  absl::StatusOr<update::LearningRateSchedule> schedule =
      update::LearningRateSchedule::Create(
          *schedule_kind, optimizer.learning_rate, config.min_learning_rate);
  if (!schedule.ok()) return schedule.status();
  return LocalExchange::Create(model, optimizer, *schedule);
}

}  // namespace

WorkerRun::WorkerRun(WorkerConfig config, int rank)
    : config_(std::move(config)), rank_(rank) {}

WorkerRun::~WorkerRun() = default;

int WorkerRun::Run() {
  if (rank_ == 0 && config_.rank0_elsewhere) {
    if (config_.rank != -1) {
      spdlog::error("bad flags: --rank0_elsewhere needs --rank=-1");
      return kExitBadConfig;
    }
    spdlog::info(
        "rank 0 runs in its own Job (--rank0_elsewhere): nothing to "
        "do here");
    return kExitOk;
  }
  for (std::optional<int> (WorkerRun::*step)() :
       {&WorkerRun::CheckSettings, &WorkerRun::StartMetrics,
        &WorkerRun::LoadDataAndModel, &WorkerRun::Connect,
        &WorkerRun::Register}) {
    if (std::optional<int> code = (this->*step)(); code.has_value()) {
      return *code;
    }
  }
  return Train();
}

int WorkerRun::Fail(const absl::Status& status, int code) {
  spdlog::error("{} (exit code {})", status.ToString(), code);
  return code;
}

std::optional<int> WorkerRun::CheckSettings() {
  absl::StatusOr<nn::ModelDescription> description =
      nn::ModelDescription::FromFlag(config_.model);
  absl::StatusOr<std::vector<std::string>> servers =
      config_.local ? std::vector<std::string>() : ResolveServers(config_);
  if (config_.local && (rank_ != 0 || config_.num_workers != 1)) {
    servers = absl::InvalidArgumentError(
        "--local trains alone: --rank=0 and --num_workers=1");
  }
  absl::Status flags = CheckWorkerConfig(config_, rank_);
  if (flags.ok()) flags = pipeline::CheckPipelineConfig(config_, rank_);
  if (flags.ok() && description.ok()) {
    flags = pipeline::CheckWorkerMemory(config_, *description);
  }
  absl::StatusOr<std::vector<int>> cpus = CpusFromFlag("cpus", config_.cpus);
  absl::StatusOr<KillPoint> kill_point =
      KillPoint::Parse(config_.test_kill_self);
  if (flags.ok() && kill_point.ok() && config_.pipeline_stages <= 1 &&
      kill_point->armed() && kill_point->moment() != KillMoment::kDone) {
    flags = absl::InvalidArgumentError(
        absl::StrCat("--test_kill_self=", config_.test_kill_self,
                     ": step, push and upload are a pipeline stage's moments "
                     "(--pipeline_stages "
                     "above 1); done is any worker's"));
  }
  for (const absl::Status& s : {description.status(), servers.status(), flags,
                                cpus.status(), kill_point.status()}) {
    if (!s.ok()) {
      spdlog::error("bad flags: {}", s.message());
      return kExitBadConfig;
    }
  }
  description_ = *std::move(description);
  servers_ = *std::move(servers);
  kill_point_ = *std::move(kill_point);
  if (!cpus->empty()) {
    if (absl::Status s = RestrictProcessToCpus(*cpus); !s.ok()) {
      spdlog::error("bad flags: --cpus: {}", s.message());
      return kExitBadConfig;
    }
    spdlog::info("running on CPUs {}", FormatCpuList(*cpus));
  }
  return std::nullopt;
}

std::optional<int> WorkerRun::StartMetrics() {
  const int port = config_.metrics_port;
  if (port <= 0) return std::nullopt;
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> started =
      MetricsEndpoint::Start(config_.metrics_host, port);
  if (!started.ok()) {
    spdlog::error("--metrics_port: {}", started.status().message());
    return kExitFailed;
  }
  endpoint_ = *std::move(started);
  metrics_ = std::make_unique<WorkerMetrics>(endpoint_->registry(), rank_);
  spdlog::info("serving metrics on {}", endpoint_->url());
  return std::nullopt;
}

std::optional<int> WorkerRun::LoadDataAndModel() {
  model_spec_ = description_->Spec(config_.seed);
  // Declare would refuse it too, but only after the data is loaded.
  if (absl::Status s = ValidateModelSpec(model_spec_, DeclarationLimits());
      !s.ok()) {
    spdlog::error("bad flags: --model: {}", s.message());
    return kExitBadConfig;
  }
  if (rank_ == 0 && !config_.save_model.empty()) {
    if (absl::Status s = CheckWritable(config_.save_model); !s.ok()) {
      return Fail(s, kExitBadConfig);
    }
  }
  // Missing or malformed data is a property of the image or --data_dir:
  // another try on the same configuration would fail the same way.
  absl::StatusOr<LabeledImages> train =
      LoadFashionMnist(config_.data_dir, Split::kTrain);
  if (!train.ok()) return Fail(train.status(), kExitBadConfig);
  train_ = *std::move(train);
  if (pipeline::EvaluatesTestSet(config_, rank_)) {
    absl::StatusOr<LabeledImages> test =
        LoadFashionMnist(config_.data_dir, Split::kTest);
    if (!test.ok()) return Fail(test.status(), kExitBadConfig);
    test_ = *std::move(test);
  }
  if (train_->example_size() != description_->example_size()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    "--model input size ", description_->example_size(),
                    " does not match the data's ", train_->example_size(),
                    " pixels per image")),
                kExitBadConfig);
  }
  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateBackend(config_.device, /*cpu_threads=*/1,
                             std::max(config_.local_rank, 0));
  if (!backend.ok()) {
    // An explicit --device the node cannot provide, or a bad value.
    return Fail(backend.status(), kExitBadConfig);
  }
  backend_ = *std::move(backend);
  if (config_.pipeline_stages > 1) {
    absl::StatusOr<std::unique_ptr<pipeline::StageRun>> stage_run =
        pipeline::StageRun::Create(config_, rank_, *description_,
                                   backend_.get());
    if (!stage_run.ok()) {
      return Fail(stage_run.status(),
                  absl::IsInvalidArgument(stage_run.status()) ? kExitBadConfig
                                                              : kExitFailed);
    }
    stage_run_ = *std::move(stage_run);
    return std::nullopt;  // No rank builds the whole model.
  }
  nn::ModelOptions model_options;
  model_options.max_batch = config_.batch_size;
  model_options.seed = config_.seed;
  absl::StatusOr<std::unique_ptr<nn::Model>> model =
      nn::CreateModel(*description_, model_options, backend_.get());
  if (!model.ok()) return Fail(model.status(), kExitFailed);
  model_ = *std::move(model);
  return std::nullopt;
}

std::optional<int> WorkerRun::JoinRing() {
  // The backend's name is "cpu" or "cuda:<ordinal>".
  int cuda_device = -1;
  if (absl::string_view name = backend_->name();
      absl::ConsumePrefix(&name, "cuda:") &&
      !absl::SimpleAtoi(name, &cuda_device)) {
    cuda_device = -1;
  }
  // Loads NCCL only for a GPU worker.
  const absl::Status nccl_available =
      cuda_device >= 0 ? allreduce::NcclAvailable() : absl::OkStatus();
  absl::StatusOr<bool> use_nccl =
      UseNccl(config_.allreduce_backend, cuda_device >= 0, nccl_available);
  if (!use_nccl.ok()) return Fail(use_nccl.status(), kExitBadConfig);
  if (cuda_device >= 0 && !*use_nccl && !nccl_available.ok()) {
    spdlog::warn("summing gradients with Gloo: {}", nccl_available.message());
  }
  absl::StatusOr<allreduce::Compression> compression =
      allreduce::ParseCompression(config_.allreduce_compression);
  if (!compression.ok()) return Fail(compression.status(), kExitBadConfig);
  allreduce::RingOptions options;
  options.coordinator = servers_.front();
  options.rank = rank_;
  options.num_workers = config_.num_workers;
  options.job_id = config_.job_id;
  options.hostname = config_.allreduce_host;
  options.join_timeout = config_.retry_timeout;
  // A peer may be evaluating (rank 0, at each epoch's end) while the others
  // wait in the next step's all-reduce.
  options.timeout = config_.retry_timeout;
  absl::StatusOr<allreduce::JoinedRing> ring = allreduce::JoinRing(options);
  if (!ring.ok()) return Fail(ring.status(), ServerCallExitCode(ring.status()));
  {
    // Every rank takes part, GPU or not, so that all choose alike: NCCL
    // only where every rank can use it, each on a GPU of its own.
    char hostname[256] = {};
    gethostname(hostname, sizeof(hostname) - 1);
    absl::StatusOr<std::vector<uint64_t>> keys = GatherGpuKeys(
        *ring->group, *use_nccl ? GpuKey(hostname, cuda_device) : kNoGpuKey);
    if (!keys.ok()) {
      return Fail(keys.status(), ServerCallExitCode(keys.status()));
    }
    if (const std::string why = WhyNotNccl(*keys); *use_nccl && !why.empty()) {
      if (config_.allreduce_backend == "nccl") {
        return Fail(absl::InvalidArgumentError(absl::StrCat(
                        "--allreduce_backend=nccl: ", why,
                        " (start at most one worker per GPU, or use gloo)")),
                    kExitBadConfig);
      }
      spdlog::warn("summing gradients with Gloo: {}", why);
      *use_nccl = false;
    }
  }
  std::unique_ptr<allreduce::NcclGroup> nccl;
  if (*use_nccl) {
    allreduce::NcclOptions nccl_options;
    nccl_options.device = cuda_device;
    nccl_options.timeout = config_.retry_timeout;
    absl::StatusOr<std::unique_ptr<allreduce::NcclGroup>> connected =
        allreduce::NcclGroup::Connect(*ring->group, nccl_options);
    if (!connected.ok()) {
      return Fail(connected.status(), ServerCallExitCode(connected.status()));
    }
    nccl = *std::move(connected);
  }
  absl::StatusOr<std::unique_ptr<LocalExchange>> local =
      LocalFromConfig(config_, model_spec_);
  if (!local.ok()) return Fail(local.status(), kExitBadConfig);
  AllreduceOptions allreduce;
  allreduce.bucket_bytes = size_t{1024} * config_.allreduce_bucket_kb;
  allreduce.checkpoint_dir = config_.checkpoint_dir;
  allreduce.checkpoint_every_steps = config_.checkpoint_every_steps;
  allreduce.compression = *compression;
  absl::StatusOr<std::unique_ptr<AllreduceExchange>> made =
      AllreduceExchange::Create(*std::move(local), std::move(ring->group),
                                allreduce, std::move(nccl));
  if (!made.ok()) return Fail(made.status(), kExitBadConfig);
  ring_weights_ = *std::move(made);
  spdlog::info(
      "joined the all-reduce ring (round {}) of {} workers: {} "
      "buckets, summed by {} ({} compression)",
      ring->round, config_.num_workers,
      ring_weights_->buckets().bucket_sizes.size(),
      *use_nccl ? absl::StrCat("NCCL on cuda:", cuda_device) : "Gloo",
      config_.allreduce_compression);
  return std::nullopt;
}

std::optional<int> WorkerRun::Connect() {
  if (config_.mode == kAllreduceMode) return JoinRing();
  if (config_.local) {
    absl::StatusOr<std::unique_ptr<LocalExchange>> made =
        LocalFromConfig(config_, model_spec_);
    if (!made.ok()) return Fail(made.status(), kExitBadConfig);
    local_weights_ = *std::move(made);
    return std::nullopt;
  }
  ClientOptions client_options;
  client_options.servers = servers_;
  client_options.rank = rank_;
  client_options.job_id = config_.job_id;
  client_options.heartbeat_period = config_.heartbeat_period;
  client_options.local_transport = config_.local_transport;
  client_options.tls_ca_file = config_.tls_ca;
  client_options.tls_cert_file = config_.tls_cert;
  client_options.tls_key_file = config_.tls_key;
  client_options.tls_server_name = config_.tls_server_name;
  client_options.token_file = config_.token_file;
  client_options.chunk_elements =
      uint64_t{1024} * config_.chunk_kb / sizeof(float);
  client_options.retry_timeout = config_.retry_timeout;
  // Checked with the rest of the config.
  client_options.compression =
      CompressionFromConfig(config_).value_or(Compression());
  if (stage_run_ != nullptr) {
    if (absl::Status s = stage_run_->UseStageGroup(&client_options); !s.ok()) {
      return Fail(s, kExitBadConfig);
    }
  }
  // Servers may come up after the workers (pods start in any order).
  client_options.connect_timeout = client_options.retry_timeout;
  absl::StatusOr<std::unique_ptr<ParameterClient>> connected =
      ParameterClient::Connect(client_options);
  if (!connected.ok()) {
    return Fail(connected.status(), ServerCallExitCode(connected.status()));
  }
  client_ = *std::move(connected);
  server_weights_ = ServerExchange(client_.get());
  if (stage_run_ != nullptr) {
    if (absl::Status s = stage_run_->ConnectNeighbours(config_); !s.ok()) {
      return Fail(s, kExitFailed);
    }
  }
  return std::nullopt;
}

std::optional<int> WorkerRun::Register() {
  TrainerOptions options;
  options.rank = rank_;
  options.num_workers = config_.num_workers;
  options.batch_size = config_.batch_size;
  options.epochs = config_.epochs;
  options.seed = config_.seed;
  options.max_steps = config_.max_steps;
  options.log_every = config_.log_every;
  options.evaluate = rank_ == 0;
  options.eval_every = config_.eval_every;
  options.save_model_path = rank_ == 0 ? config_.save_model : "";
  options.slowdown = absl::Milliseconds(config_.slowdown_ms);
  options.metrics = metrics_.get();
  WeightExchange* weights = server_weights_.get();
  if (config_.local) weights = local_weights_.get();
  if (ring_weights_ != nullptr) weights = ring_weights_.get();
  uint64_t planned_steps = 0;
  if (stage_run_ != nullptr) {
    absl::Status made = stage_run_->MakeTrainer(
        config_, weights, &*train_, test_.has_value() ? &*test_ : nullptr);
    if (!made.ok()) return Fail(made, kExitBadConfig);
    planned_steps = stage_run_->planned_steps();
  } else {
    absl::StatusOr<std::unique_ptr<Trainer>> trainer =
        Trainer::Create(options, weights, model_.get(), &*train_,
                        rank_ == 0 ? &*test_ : nullptr);
    if (!trainer.ok()) return Fail(trainer.status(), kExitBadConfig);
    trainer_ = *std::move(trainer);
    planned_steps = trainer_->planned_steps();
  }

  const uint32_t batch = static_cast<uint32_t>(config_.batch_size);
  absl::StatusOr<Registration> info =
      ring_weights_ != nullptr ? ring_weights_->Declare(planned_steps)
      : stage_run_ != nullptr
          ? stage_run_->Declare(client_.get(), planned_steps, batch)
      : config_.local ? local_weights_->Declare(planned_steps)
                      : client_->Declare(model_spec_, planned_steps, batch);
  if (!info.ok()) return Fail(info.status(), ServerCallExitCode(info.status()));
  registration_ = *std::move(info);
  const std::string& expected_mode = config_.mode;
  if (!expected_mode.empty() && expected_mode != kAllreduceMode &&
      *ParseConsistencyMode(expected_mode) != registration_.mode) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
                    "--mode=", expected_mode, " but the servers run ",
                    ConsistencyModeName(registration_.mode))),
                kExitBadConfig);
  }
  // A stage's group has the replicas for workers.
  const int workers =
      stage_run_ != nullptr ? stage_run_->group_workers() : config_.num_workers;
  if (registration_.num_workers != workers) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
                    "--num_workers=", config_.num_workers,
                    stage_run_ != nullptr ? " (replicas x stages)" : "",
                    " but the servers expect ", registration_.num_workers)),
                kExitBadConfig);
  }
  if (ring_weights_ != nullptr) {
    spdlog::info("training in the all-reduce ring, without servers: device {}",
                 backend_->name());
  } else if (config_.local) {
    spdlog::info("training locally, without servers: device {}",
                 backend_->name());
  } else {
    spdlog::info("registered with {} servers: mode {}, {} workers, device {}",
                 servers_.size(), ConsistencyModeName(registration_.mode),
                 config_.num_workers, backend_->name());
  }
  return std::nullopt;
}

int WorkerRun::Train() {
  absl::StatusOr<TrainingSummary> summary =
      stage_run_ != nullptr ? stage_run_->Train(registration_)
                            : trainer_->Run(registration_);
  if (!summary.ok()) {
    return Fail(summary.status(), ServerCallExitCode(summary.status()));
  }
  if (ring_weights_ != nullptr) {
    // What --extend trains on from (rank 0's; the others do nothing).
    absl::Status written = ring_weights_->WriteCheckpoint();
    if (!written.ok()) return Fail(written, kExitFailed);
  }
  if (client_ != nullptr) {
    // The Done RPC: the servers stop waiting for this rank.
    absl::Status done = client_->Finish();
    if (!done.ok()) return Fail(done, ServerCallExitCode(done));
  }
  spdlog::info("{}", FormatProgressLine(TrainedSummary{
                         static_cast<int64_t>(summary->steps),
                         static_cast<int64_t>(summary->examples),
                         absl::ToDoubleSeconds(summary->wall_time),
                         summary->final_loss}));
  if (summary->steps > 0) {
    // Where a step's time went; in sync mode communication includes the
    // wait for the other workers (the servers' reports give it).
    const StepTiming& t = summary->step_time;
    const double steps = static_cast<double>(summary->steps);
    spdlog::info("{}", FormatProgressLine(StepTimeSplit{
                           absl::ToDoubleMilliseconds(t.compute) / steps,
                           absl::ToDoubleMilliseconds(t.communication) / steps,
                           absl::ToDoubleMilliseconds(t.waiting) / steps}));
  }
  if (rank_ == 0) {
    // The launcher reads this line.
    spdlog::info("{}",
                 FormatProgressLine(FinalAccuracy{summary->test_accuracy}));
  }
  kill_point_.FireIf(rank_, KillMoment::kDone);
  return kExitOk;
}

}  // namespace ps::worker
