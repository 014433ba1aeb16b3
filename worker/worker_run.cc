#include "worker/worker_run.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/parameter_client.h"
#include "common/consistency_mode.h"
#include "common/cpu_affinity.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/metrics_http.h"
#include "common/model_spec.h"
#include "common/progress_line.h"
#include "kernels/device.h"
#include "server/lr_schedule.h"
#include "server/optimizer.h"
#include "spdlog/spdlog.h"
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
  absl::StatusOr<server::OptimizerKind> kind =
      server::ParseOptimizerKind(config.optimizer);
  if (!kind.ok()) return kind.status();
  server::OptimizerConfig optimizer;
  optimizer.kind = *kind;
  optimizer.learning_rate = config.learning_rate;
  optimizer.momentum = config.momentum;
  optimizer.weight_decay = config.weight_decay;
  optimizer.beta1 = config.beta1;
  optimizer.beta2 = config.beta2;
  optimizer.epsilon = config.epsilon;
  absl::StatusOr<server::LrScheduleKind> schedule_kind =
      server::ParseLrSchedule(config.lr_schedule);
  if (!schedule_kind.ok()) return schedule_kind.status();
  absl::StatusOr<server::LearningRateSchedule> schedule =
      server::LearningRateSchedule::Create(
          *schedule_kind, optimizer.learning_rate, config.min_learning_rate);
  if (!schedule.ok()) return schedule.status();
  return LocalExchange::Create(model, optimizer, *schedule);
}

}  // namespace

WorkerRun::WorkerRun(WorkerConfig config, int rank)
    : config_(std::move(config)), rank_(rank) {}

int WorkerRun::Run() {
  const WorkerConfig& config = config_;
  if (rank_ == 0 && config.rank0_elsewhere) {
    if (config.rank != -1) {
      spdlog::error("bad flags: --rank0_elsewhere needs --rank=-1");
      return kExitBadConfig;
    }
    spdlog::info(
        "rank 0 runs in its own Job (--rank0_elsewhere): nothing to "
        "do here");
    return 0;
  }
  const int num_workers = config.num_workers;
  absl::StatusOr<nn::ModelDescription> description =
      nn::ModelDescription::FromFlag(config.model);
  const bool local = config.local;
  absl::StatusOr<std::vector<std::string>> servers =
      local ? std::vector<std::string>() : ResolveServers(config);
  if (local && (rank_ != 0 || num_workers != 1)) {
    servers = absl::InvalidArgumentError(
        "--local trains alone: --rank=0 and --num_workers=1");
  }
  absl::Status flags = CheckWorkerConfig(config, rank_);
  absl::StatusOr<std::vector<int>> cpus = CpusFromFlag("cpus", config.cpus);
  for (const absl::Status& s :
       {description.status(), servers.status(), flags, cpus.status()}) {
    if (!s.ok()) {
      spdlog::error("bad flags: {}", s.message());
      return kExitBadConfig;
    }
  }
  if (!cpus->empty()) {
    if (absl::Status s = RestrictProcessToCpus(*cpus); !s.ok()) {
      spdlog::error("bad flags: --cpus: {}", s.message());
      return kExitBadConfig;
    }
    spdlog::info("running on CPUs {}", FormatCpuList(*cpus));
  }
  std::unique_ptr<MetricsEndpoint> endpoint;
  std::unique_ptr<WorkerMetrics> metrics;
  if (const int port = config.metrics_port; port > 0) {
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> started =
        MetricsEndpoint::Start(config.metrics_host, port);
    if (!started.ok()) {
      spdlog::error("--metrics_port: {}", started.status().message());
      return kExitFailed;
    }
    endpoint = *std::move(started);
    metrics = std::make_unique<WorkerMetrics>(endpoint->registry(), rank_);
    spdlog::info("serving metrics on {}", endpoint->url());
  }

  const ModelSpec model_spec = description->Spec(config.seed);
  // Declare would refuse it too, but only after the data is loaded.
  if (absl::Status s = ValidateModelSpec(model_spec, DeclarationLimits());
      !s.ok()) {
    spdlog::error("bad flags: --model: {}", s.message());
    return kExitBadConfig;
  }

  auto fail = [](const absl::Status& status, int code) {
    spdlog::error("{} (exit code {})", status.ToString(), code);
    return code;
  };
  const std::string save_model = config.save_model;
  if (rank_ == 0 && !save_model.empty()) {
    if (absl::Status s = CheckWritable(save_model); !s.ok()) {
      return fail(s, kExitBadConfig);
    }
  }
  // Missing or malformed data is a property of the image or --data_dir:
  // another try on the same configuration would fail the same way.
  const std::string data_dir = config.data_dir;
  absl::StatusOr<LabeledImages> train =
      LoadFashionMnist(data_dir, Split::kTrain);
  if (!train.ok()) return fail(train.status(), kExitBadConfig);
  absl::StatusOr<LabeledImages> test;
  if (rank_ == 0) {
    test = LoadFashionMnist(data_dir, Split::kTest);
    if (!test.ok()) return fail(test.status(), kExitBadConfig);
  }
  if (train->example_size() != description->example_size()) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
                    "--model input size ", description->example_size(),
                    " does not match the data's ", train->example_size(),
                    " pixels per image")),
                kExitBadConfig);
  }

  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateBackend(config.device);
  if (!backend.ok()) {
    // An explicit --device the node cannot provide, or a bad value.
    return fail(backend.status(), kExitBadConfig);
  }
  const int batch_size = config.batch_size;
  nn::ModelOptions model_options;
  model_options.max_batch = batch_size;
  model_options.seed = config.seed;
  absl::StatusOr<std::unique_ptr<nn::Model>> model =
      nn::CreateModel(*description, model_options, backend->get());
  if (!model.ok()) return fail(model.status(), kExitFailed);

  std::unique_ptr<ParameterClient> client;
  std::unique_ptr<LocalExchange> local_weights;
  std::unique_ptr<WeightExchange> server_weights;
  if (local) {
    absl::StatusOr<std::unique_ptr<LocalExchange>> made =
        LocalFromConfig(config, model_spec);
    if (!made.ok()) return fail(made.status(), kExitBadConfig);
    local_weights = *std::move(made);
  } else {
    ClientOptions client_options;
    client_options.servers = *servers;
    client_options.rank = rank_;
    client_options.job_id = config.job_id;
    client_options.heartbeat_period = config.heartbeat_period;
    client_options.local_transport = config.local_transport;
    client_options.tls_ca_file = config.tls_ca;
    client_options.tls_cert_file = config.tls_cert;
    client_options.tls_key_file = config.tls_key;
    client_options.tls_server_name = config.tls_server_name;
    client_options.token_file = config.token_file;
    client_options.chunk_elements =
        uint64_t{1024} * config.chunk_kb / sizeof(float);
    client_options.retry_timeout = config.retry_timeout;
    // Servers may come up after the workers (pods start in any order).
    client_options.connect_timeout = client_options.retry_timeout;
    absl::StatusOr<std::unique_ptr<ParameterClient>> connected =
        ParameterClient::Connect(client_options);
    if (!connected.ok()) {
      return fail(connected.status(), ServerCallExitCode(connected.status()));
    }
    client = *std::move(connected);
    server_weights = ServerExchange(client.get());
  }
  TrainerOptions options;
  options.rank = rank_;
  options.num_workers = num_workers;
  options.batch_size = batch_size;
  options.epochs = config.epochs;
  options.seed = config.seed;
  options.max_steps = config.max_steps;
  options.log_every = config.log_every;
  options.evaluate = rank_ == 0;
  options.eval_every = config.eval_every;
  options.save_model_path = rank_ == 0 ? save_model : "";
  options.slowdown = absl::Milliseconds(config.slowdown_ms);
  options.metrics = metrics.get();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(
      options, local ? local_weights.get() : server_weights.get(), model->get(),
      &*train, rank_ == 0 ? &*test : nullptr);
  if (!trainer.ok()) return fail(trainer.status(), kExitBadConfig);

  absl::StatusOr<Registration> info =
      local ? local_weights->Declare((*trainer)->planned_steps())
            : client->Declare(model_spec, (*trainer)->planned_steps(),
                              static_cast<uint32_t>(batch_size));
  if (!info.ok()) return fail(info.status(), ServerCallExitCode(info.status()));
  const std::string expected_mode = config.mode;
  if (!expected_mode.empty() &&
      *ParseConsistencyMode(expected_mode) != info->mode) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
                    "--mode=", expected_mode, " but the servers run ",
                    ConsistencyModeName(info->mode))),
                kExitBadConfig);
  }
  if (info->num_workers != num_workers) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
                    "--num_workers=", num_workers, " but the servers expect ",
                    info->num_workers)),
                kExitBadConfig);
  }
  if (local) {
    spdlog::info("training locally, without servers: device {}",
                 (*backend)->name());
  } else {
    spdlog::info("registered with {} servers: mode {}, {} workers, device {}",
                 servers->size(), ConsistencyModeName(info->mode), num_workers,
                 (*backend)->name());
  }

  absl::StatusOr<TrainingSummary> summary = (*trainer)->Run(*info);
  if (!summary.ok()) {
    return fail(summary.status(), ServerCallExitCode(summary.status()));
  }

  if (client != nullptr) {
    // The Done RPC: the servers stop waiting for this rank.
    absl::Status done = client->Finish();
    if (!done.ok()) return fail(done, ServerCallExitCode(done));
  }
  spdlog::info("trained {} steps on {} examples in {}, last loss {:.4f}",
               summary->steps, summary->examples,
               absl::FormatDuration(summary->wall_time), summary->final_loss);
  if (summary->steps > 0) {
    // Where a step's time went; in sync mode communication includes the
    // wait for the other workers (the servers' reports give it).
    const StepTiming& t = summary->step_time;
    const double steps = static_cast<double>(summary->steps);
    spdlog::info(
        "time per step: compute {:.3f} ms, communication {:.3f} ms, "
        "slowdown {:.3f} ms",
        absl::ToDoubleMilliseconds(t.compute) / steps,
        absl::ToDoubleMilliseconds(t.communication) / steps,
        absl::ToDoubleMilliseconds(t.waiting) / steps);
  }
  if (rank_ == 0) {
    // The launcher reads this line.
    spdlog::info("{}",
                 FormatProgressLine(FinalAccuracy{summary->test_accuracy}));
  }
  return 0;
}

}  // namespace ps::worker
