// The training worker: `worker --rank=0 --num_workers=2 --servers=h:p,h:p`.
//
// Exit codes (also in --help): see kUsage below.

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/parameter_client.h"
#include "common/auth_files.h"
#include "common/cluster_address.h"
#include "common/consistency_mode.h"
#include "common/cpu_affinity.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/metrics_http.h"
#include "common/model_spec.h"
#include "common/progress_line.h"
#include "common/stop_signals.h"
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

ABSL_FLAG(int, rank, 0,
          "This worker's rank in [0, num_workers); -1 reads it from "
          "$JOB_COMPLETION_INDEX (Kubernetes Indexed Job)");
ABSL_FLAG(bool, rank0_elsewhere, false,
          "With --rank=-1: rank 0 runs in a Job of its own (the one pod that "
          "mounts the model store), so the pod of completion index 0 exits 0 "
          "at once");
ABSL_FLAG(int, num_workers, 1, "Number of workers in the job");
ABSL_FLAG(std::string, job_id, "",
          "The job's id, as the servers' --job_id: servers of another job "
          "refuse this worker");
ABSL_FLAG(std::string, servers, "",
          "Comma-separated host:port of every parameter server, in index "
          "order");
ABSL_FLAG(std::string, server_pattern, "",
          "Instead of --servers: an address with {index}, e.g. "
          "ps-server-{index}.ps-server:7000, expanded for --num_servers");
ABSL_FLAG(int, num_servers, 0, "Number of servers (with --server_pattern)");
ABSL_FLAG(std::string, model, "784-256-128-10",
          "The network: MLP layer sizes (784-256-128-10), a preset (mlp, "
          "cnn), a layer stack (\"input 1x28x28; conv 32 3x3 pad 1; relu; "
          "...\") or @file holding one; see worker/nn/model_description.h");
ABSL_FLAG(int, batch_size, 64, "Examples per step on this worker");
ABSL_FLAG(int, epochs, 10, "Passes over the training set");
ABSL_FLAG(uint64_t, max_steps, 0, "Stop after this many steps (0: no limit)");
ABSL_FLAG(uint64_t, seed, 1,
          "Seed of the data shuffle and of the initial weights, which the "
          "servers draw from the declared model's seed (same on every "
          "worker)");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Directory with the Fashion-MNIST IDX files");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda");
ABSL_FLAG(std::string, mode, "",
          "Expected consistency mode (sync, ssp, async); empty accepts the "
          "servers'");
ABSL_FLAG(std::string, save_model, "", "Rank 0 writes the final model here");
ABSL_FLAG(int, log_every, 100, "Progress line every this many steps");
ABSL_FLAG(int, eval_every, 0,
          "Rank 0 also measures test accuracy every this many steps (0: only "
          "at each epoch's end)");
ABSL_FLAG(int, slowdown_ms, 0,
          "Sleep this long every step, between its push and its next pull "
          "(to slow one worker on purpose)");
ABSL_FLAG(int, chunk_kb, 1024, "Size of streamed tensor chunks, in KiB");
ABSL_FLAG(absl::Duration, retry_timeout, absl::Seconds(120),
          "How long to wait for servers to come up, and to keep retrying an "
          "unreachable one (e.g. while it restarts), before giving up");
ABSL_FLAG(bool, local_transport, true,
          "Reach servers on this host over the Unix socket they announce "
          "rather than gRPC over TCP (fewer copies and thread hand-offs); "
          "servers on other hosts are reached through gRPC either way");
ABSL_FLAG(absl::Duration, heartbeat_period, absl::Seconds(1),
          "How often this worker tells every server, between its calls, "
          "that it is alive and which steps it has done (keep it well "
          "below the servers' --worker_timeout)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM certificate of the CA that signed the servers' --tls_cert: "
          "speak TLS and refuse servers it did not sign. Empty: plaintext.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate of this worker, for servers that require one "
          "(--tls_client_ca); with --tls_key. Needs --tls_ca.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "The name every server's certificate must carry (e.g. ps-server); "
          "empty: each server's host as given. Needs --tls_ca.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the job token (the servers' --token_file), sent with "
          "every call. Needs --tls_ca.");
ABSL_FLAG(bool, local, false,
          "Train in this process alone, without servers (one worker): the "
          "weights are initialised and updated by the servers' own code with "
          "the optimizer flags below, as one sync server would; the baseline "
          "training through servers is measured against");
ABSL_FLAG(std::string, optimizer,
          std::string(ps::server::OptimizerKindName(
              ps::server::OptimizerConfig().kind)),
          "With --local: adam or sgd, as the servers' flag");
ABSL_FLAG(float, learning_rate, ps::server::OptimizerConfig().learning_rate,
          "With --local: as the servers' flag");
ABSL_FLAG(float, momentum, ps::server::OptimizerConfig().momentum,
          "With --local: as the servers' flag");
ABSL_FLAG(float, weight_decay, ps::server::OptimizerConfig().weight_decay,
          "With --local: as the servers' flag");
ABSL_FLAG(float, beta1, ps::server::OptimizerConfig().beta1,
          "With --local: as the servers' flag");
ABSL_FLAG(float, beta2, ps::server::OptimizerConfig().beta2,
          "With --local: as the servers' flag");
ABSL_FLAG(float, epsilon, ps::server::OptimizerConfig().epsilon,
          "With --local: as the servers' flag");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "With --local: constant or cosine, as the servers' flag");
ABSL_FLAG(float, min_learning_rate, 0.0f, "With --local: as the servers' flag");
ABSL_FLAG(std::string, cpus, "",
          "CPUs this worker may run on, in the kernel's list format "
          "(\"0-3,8\"); empty: any. On a host shared with servers, separate "
          "cores for workers and servers keep the scheduler from moving them "
          "onto each other's.");
ABSL_FLAG(int, metrics_port, 0,
          "If not 0, serve Prometheus metrics (steps, step time by phase, "
          "examples/s, loss) at http://<--metrics_host>:<port>/metrics.");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "IPv4 address the metrics endpoint listens on; 0.0.0.0 for every "
          "interface (a Kubernetes pod scraped from outside).");

namespace ps::worker {
namespace {

constexpr char kUsage[] =
    "Trains its shard of Fashion-MNIST against the parameter servers.\n"
    "Exit codes: 0 trained to the end; 1 training failed (the log says why; "
    "worth a retry); 2 bad configuration: flags, data, model, a --save_model "
    "directory it cannot write, or a mode or worker count the servers do not "
    "share (never retry); 3 lost the servers: one stayed unreachable past "
    "--retry_timeout (retry once they are back); 143 stopped by SIGTERM or "
    "SIGINT (the current step is abandoned; the servers let a restarted "
    "worker of the same rank resume).";

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

absl::StatusOr<int> ResolveRank() {
  const int rank = absl::GetFlag(FLAGS_rank);
  if (rank != -1) return rank;
  return RankFromEnv(std::getenv("JOB_COMPLETION_INDEX"));
}

absl::StatusOr<std::vector<std::string>> ResolveServers() {
  const std::string list = absl::GetFlag(FLAGS_servers);
  const std::string pattern = absl::GetFlag(FLAGS_server_pattern);
  if (list.empty() == pattern.empty()) {
    return absl::InvalidArgumentError(
        "give exactly one of --servers and --server_pattern");
  }
  if (!list.empty()) return ParseServerList(list);
  return ExpandServerPattern(pattern, absl::GetFlag(FLAGS_num_servers));
}

// The authentication flags go together as ClientOptions says; their files
// are read now so that an error names the flag.
absl::Status CheckAuthFlags() {
  const std::string ca = absl::GetFlag(FLAGS_tls_ca);
  const std::string cert = absl::GetFlag(FLAGS_tls_cert);
  const std::string key = absl::GetFlag(FLAGS_tls_key);
  const std::string token = absl::GetFlag(FLAGS_token_file);
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: this worker's certificate and "
        "its private key");
  }
  if (ca.empty()) {
    if (!cert.empty() || !token.empty() ||
        !absl::GetFlag(FLAGS_tls_server_name).empty()) {
      return absl::InvalidArgumentError(
          "--tls_cert, --tls_server_name and --token_file need --tls_ca: "
          "the worker checks the servers' certificates with it, and sends a "
          "token only over TLS");
    }
    return absl::OkStatus();
  }
  for (absl::Status s : {
           ReadPemFile("--tls_ca", ca, "CERTIFICATE").status(),
           cert.empty()
               ? absl::OkStatus()
               : ReadPemFile("--tls_cert", cert, "CERTIFICATE").status(),
           key.empty() ? absl::OkStatus()
                       : ReadPemFile("--tls_key", key, "PRIVATE KEY").status(),
           token.empty() ? absl::OkStatus()
                         : ReadTokenFile("--token_file", token).status(),
       }) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckFlags(int rank, int num_workers) {
  if (num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_workers must be at least 1, got ", num_workers));
  }
  if (rank < 0 || rank >= num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank must be in [0, ", num_workers, "), got ", rank));
  }
  if (absl::GetFlag(FLAGS_batch_size) < 1 ||
      absl::GetFlag(FLAGS_batch_size) > 65536) {
    return absl::InvalidArgumentError("--batch_size must be in [1, 65536]");
  }
  if (absl::GetFlag(FLAGS_epochs) < 1) {
    return absl::InvalidArgumentError("--epochs must be at least 1");
  }
  if (absl::GetFlag(FLAGS_log_every) < 1) {
    return absl::InvalidArgumentError("--log_every must be at least 1");
  }
  if (absl::GetFlag(FLAGS_eval_every) < 0) {
    return absl::InvalidArgumentError("--eval_every must not be negative");
  }
  if (absl::GetFlag(FLAGS_slowdown_ms) < 0) {
    return absl::InvalidArgumentError("--slowdown_ms must not be negative");
  }
  const int chunk_kb = absl::GetFlag(FLAGS_chunk_kb);
  if (chunk_kb < 1 || chunk_kb > 32 * 1024) {
    return absl::InvalidArgumentError("--chunk_kb must be in [1, 32768]");
  }
  if (absl::GetFlag(FLAGS_retry_timeout) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--retry_timeout must not be negative");
  }
  if (absl::GetFlag(FLAGS_heartbeat_period) <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--heartbeat_period must be positive");
  }
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (!mode.empty()) {
    if (absl::Status s = ParseConsistencyMode(mode).status(); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = ValidateJobId(absl::GetFlag(FLAGS_job_id)); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--job_id: ", s.message()));
  }
  if (absl::Status s = ValidateMetricsFlags(absl::GetFlag(FLAGS_metrics_host),
                                            absl::GetFlag(FLAGS_metrics_port));
      !s.ok()) {
    return s;
  }
  return CheckAuthFlags();
}

// The weights of --local, updated as the optimizer flags say.
absl::StatusOr<std::unique_ptr<LocalExchange>> LocalFromFlags(
    const ModelSpec& model) {
  absl::StatusOr<server::OptimizerKind> kind =
      server::ParseOptimizerKind(absl::GetFlag(FLAGS_optimizer));
  if (!kind.ok()) return kind.status();
  server::OptimizerConfig optimizer;
  optimizer.kind = *kind;
  optimizer.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  optimizer.momentum = absl::GetFlag(FLAGS_momentum);
  optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  optimizer.beta1 = absl::GetFlag(FLAGS_beta1);
  optimizer.beta2 = absl::GetFlag(FLAGS_beta2);
  optimizer.epsilon = absl::GetFlag(FLAGS_epsilon);
  absl::StatusOr<server::LrScheduleKind> schedule_kind =
      server::ParseLrSchedule(absl::GetFlag(FLAGS_lr_schedule));
  if (!schedule_kind.ok()) return schedule_kind.status();
  absl::StatusOr<server::LearningRateSchedule> schedule =
      server::LearningRateSchedule::Create(
          *schedule_kind, optimizer.learning_rate,
          absl::GetFlag(FLAGS_min_learning_rate));
  if (!schedule.ok()) return schedule.status();
  return LocalExchange::Create(model, optimizer, *schedule);
}

// Returns the process exit code.
int Run() {
  absl::StatusOr<int> rank = ResolveRank();
  if (!rank.ok()) {
    spdlog::error("bad flags: {}", rank.status().message());
    return kExitBadConfig;
  }
  InitLogging("worker", *rank);
  if (*rank == 0 && absl::GetFlag(FLAGS_rank0_elsewhere)) {
    if (absl::GetFlag(FLAGS_rank) != -1) {
      spdlog::error("bad flags: --rank0_elsewhere needs --rank=-1");
      return kExitBadConfig;
    }
    spdlog::info(
        "rank 0 runs in its own Job (--rank0_elsewhere): nothing to "
        "do here");
    return 0;
  }
  const int num_workers = absl::GetFlag(FLAGS_num_workers);
  absl::StatusOr<nn::ModelDescription> description =
      nn::ModelDescription::FromFlag(absl::GetFlag(FLAGS_model));
  const bool local = absl::GetFlag(FLAGS_local);
  absl::StatusOr<std::vector<std::string>> servers =
      local ? std::vector<std::string>() : ResolveServers();
  if (local && (*rank != 0 || num_workers != 1)) {
    servers = absl::InvalidArgumentError(
        "--local trains alone: --rank=0 and --num_workers=1");
  }
  absl::Status flags = CheckFlags(*rank, num_workers);
  absl::StatusOr<std::vector<int>> cpus =
      CpusFromFlag("cpus", absl::GetFlag(FLAGS_cpus));
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
  if (const int port = absl::GetFlag(FLAGS_metrics_port); port > 0) {
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> started =
        MetricsEndpoint::Start(absl::GetFlag(FLAGS_metrics_host), port);
    if (!started.ok()) {
      spdlog::error("--metrics_port: {}", started.status().message());
      return kExitFailed;
    }
    endpoint = *std::move(started);
    metrics = std::make_unique<WorkerMetrics>(endpoint->registry(), *rank);
    spdlog::info("serving metrics on {}", endpoint->url());
  }

  const ModelSpec model_spec = description->Spec(absl::GetFlag(FLAGS_seed));
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
  const std::string save_model = absl::GetFlag(FLAGS_save_model);
  if (*rank == 0 && !save_model.empty()) {
    if (absl::Status s = CheckWritable(save_model); !s.ok()) {
      return fail(s, kExitBadConfig);
    }
  }
  // Missing or malformed data is a property of the image or --data_dir:
  // another try on the same configuration would fail the same way.
  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  absl::StatusOr<LabeledImages> train =
      LoadFashionMnist(data_dir, Split::kTrain);
  if (!train.ok()) return fail(train.status(), kExitBadConfig);
  absl::StatusOr<LabeledImages> test;
  if (*rank == 0) {
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
      kernels::CreateBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) {
    // An explicit --device the node cannot provide, or a bad value.
    return fail(backend.status(), kExitBadConfig);
  }
  const int batch_size = absl::GetFlag(FLAGS_batch_size);
  nn::ModelOptions model_options;
  model_options.max_batch = batch_size;
  model_options.seed = absl::GetFlag(FLAGS_seed);
  absl::StatusOr<std::unique_ptr<nn::Model>> model =
      nn::CreateModel(*description, model_options, backend->get());
  if (!model.ok()) return fail(model.status(), kExitFailed);

  std::unique_ptr<ParameterClient> client;
  std::unique_ptr<LocalExchange> local_weights;
  std::unique_ptr<WeightExchange> server_weights;
  if (local) {
    absl::StatusOr<std::unique_ptr<LocalExchange>> made =
        LocalFromFlags(model_spec);
    if (!made.ok()) return fail(made.status(), kExitBadConfig);
    local_weights = *std::move(made);
  } else {
    ClientOptions client_options;
    client_options.servers = *servers;
    client_options.rank = *rank;
    client_options.job_id = absl::GetFlag(FLAGS_job_id);
    client_options.heartbeat_period = absl::GetFlag(FLAGS_heartbeat_period);
    client_options.local_transport = absl::GetFlag(FLAGS_local_transport);
    client_options.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
    client_options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
    client_options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
    client_options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
    client_options.token_file = absl::GetFlag(FLAGS_token_file);
    client_options.chunk_elements =
        uint64_t{1024} * absl::GetFlag(FLAGS_chunk_kb) / sizeof(float);
    client_options.retry_timeout = absl::GetFlag(FLAGS_retry_timeout);
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
  options.rank = *rank;
  options.num_workers = num_workers;
  options.batch_size = batch_size;
  options.epochs = absl::GetFlag(FLAGS_epochs);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.max_steps = absl::GetFlag(FLAGS_max_steps);
  options.log_every = absl::GetFlag(FLAGS_log_every);
  options.evaluate = *rank == 0;
  options.eval_every = absl::GetFlag(FLAGS_eval_every);
  options.save_model_path = *rank == 0 ? save_model : "";
  options.slowdown = absl::Milliseconds(absl::GetFlag(FLAGS_slowdown_ms));
  options.metrics = metrics.get();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(
      options, local ? local_weights.get() : server_weights.get(), model->get(),
      &*train, *rank == 0 ? &*test : nullptr);
  if (!trainer.ok()) return fail(trainer.status(), kExitBadConfig);

  absl::StatusOr<Registration> info =
      local ? local_weights->Declare((*trainer)->planned_steps())
            : client->Declare(model_spec, (*trainer)->planned_steps(),
                              static_cast<uint32_t>(batch_size));
  if (!info.ok()) return fail(info.status(), ServerCallExitCode(info.status()));
  const std::string expected_mode = absl::GetFlag(FLAGS_mode);
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
  if (*rank == 0) {
    // The launcher reads this line.
    spdlog::info("{}",
                 FormatProgressLine(FinalAccuracy{summary->test_accuracy}));
  }
  return 0;
}

}  // namespace
}  // namespace ps::worker

int main(int argc, char** argv) {
  // Before anything else, so that every thread inherits the mask
  // (common/stop_signals.h).
  absl::StatusOr<std::unique_ptr<ps::StopSignals>> signals =
      ps::StopSignals::Install({SIGTERM, SIGINT});
  if (!signals.ok()) {
    std::fprintf(stderr, "worker: %s\n",
                 std::string(signals.status().message()).c_str());
    return ps::kExitFailed;
  }
  ps::KeepFreedMemory();
  // Debian's Abseil checks every lock order at run time; a release binary
  // need not pay for it on each step's locks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(ps::worker::kUsage);
  absl::ParseCommandLine(argc, argv);

  // Training runs on this thread; a signal ends the process from the
  // signals' thread, abandoning the step in flight: the shards treat that
  // like a worker that died, and a replacement of the same rank resumes
  // where it stood.
  (*signals)->Watch([](int sig) {
    spdlog::warn(
        "stopping on signal {} ({}): the current step is abandoned "
        "(exit code {})",
        sig, strsignal(sig), ps::kExitTerminated);
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(ps::kExitTerminated);
  });
  return ps::worker::Run();
}
