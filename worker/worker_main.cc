// The training worker: `worker --rank=0 --num_workers=2 --servers=h:p,h:p`.
//
// Exit codes: 0 trained to the end, 1 training failed (the log says why),
// 2 bad flags.

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_address.h"
#include "common/cpu_affinity.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "kernels/device.h"
#include "spdlog/spdlog.h"
#include "worker/idx_reader.h"
#include "worker/mlp.h"
#include "worker/ps_client.h"
#include "worker/trainer.h"

ABSL_FLAG(int, rank, 0,
          "This worker's rank in [0, num_workers); -1 reads it from "
          "$JOB_COMPLETION_INDEX (Kubernetes Indexed Job)");
ABSL_FLAG(int, num_workers, 1, "Number of workers in the job");
ABSL_FLAG(std::string, servers, "",
          "Comma-separated host:port of every parameter server, in index "
          "order");
ABSL_FLAG(std::string, server_pattern, "",
          "Instead of --servers: an address with {index}, e.g. "
          "ps-server-{index}.ps-server:7000, expanded for --num_servers");
ABSL_FLAG(int, num_servers, 0, "Number of servers (with --server_pattern)");
ABSL_FLAG(std::string, model, "784-256-128-10", "MLP layer sizes");
ABSL_FLAG(int, batch_size, 64, "Examples per step on this worker");
ABSL_FLAG(int, epochs, 10, "Passes over the training set");
ABSL_FLAG(uint64_t, max_steps, 0, "Stop after this many steps (0: no limit)");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the data shuffle (same on every worker)");
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
ABSL_FLAG(absl::Duration, heartbeat_period, absl::Seconds(1),
          "How often to tell the servers this worker is alive");
ABSL_FLAG(std::string, cpus, "",
          "CPUs this worker may run on, in the kernel's list format "
          "(\"0-3,8\"); empty: any. On a host shared with servers, separate "
          "cores for workers and servers keep the scheduler from moving them "
          "onto each other's.");

namespace ps::worker {
namespace {

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
  if (!mode.empty() && mode != "sync" && mode != "ssp" && mode != "async") {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode must be sync, ssp or async, got \"", mode, "\""));
  }
  return absl::OkStatus();
}

// Returns the process exit code.
int Run() {
  absl::StatusOr<int> rank = ResolveRank();
  if (!rank.ok()) {
    spdlog::error("{}", rank.status().ToString());
    return 2;
  }
  InitLogging("worker", *rank);
  const int num_workers = absl::GetFlag(FLAGS_num_workers);
  absl::StatusOr<std::vector<int>> layers =
      ParseLayerSizes(absl::GetFlag(FLAGS_model));
  absl::StatusOr<std::vector<std::string>> servers = ResolveServers();
  absl::Status flags = CheckFlags(*rank, num_workers);
  absl::StatusOr<std::vector<int>> cpus =
      CpusFromFlag("cpus", absl::GetFlag(FLAGS_cpus));
  for (const absl::Status& s :
       {layers.status(), servers.status(), flags, cpus.status()}) {
    if (!s.ok()) {
      spdlog::error("bad flags: {}", s.message());
      return 2;
    }
  }
  if (!cpus->empty()) {
    if (absl::Status s = RestrictProcessToCpus(*cpus); !s.ok()) {
      spdlog::error("bad flags: --cpus: {}", s.message());
      return 2;
    }
    spdlog::info("running on CPUs {}", FormatCpuList(*cpus));
  }

  const ModelSpec model_spec = MlpModelSpec(*layers);
  absl::StatusOr<Partition> partition =
      Partition::Create(model_spec, static_cast<int>(servers->size()));
  if (!partition.ok()) {
    spdlog::error("{}", partition.status().ToString());
    return 2;
  }

  auto fail = [](const absl::Status& status) {
    spdlog::error("{}", status.ToString());
    return 1;
  };
  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  absl::StatusOr<LabeledImages> train =
      LoadFashionMnist(data_dir, Split::kTrain);
  if (!train.ok()) return fail(train.status());
  absl::StatusOr<LabeledImages> test;
  if (*rank == 0) {
    test = LoadFashionMnist(data_dir, Split::kTest);
    if (!test.ok()) return fail(test.status());
  }
  if (train->example_size() != (*layers)[0]) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "--model input size ", (*layers)[0], " does not match the data's ",
        train->example_size(), " pixels per image")));
  }

  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) return fail(backend.status());
  const int batch_size = absl::GetFlag(FLAGS_batch_size);
  absl::StatusOr<std::unique_ptr<Mlp>> mlp =
      Mlp::Create(model_spec, batch_size, backend->get());
  if (!mlp.ok()) return fail(mlp.status());

  ClientOptions client_options;
  client_options.rank = *rank;
  client_options.chunk_elements =
      uint64_t{1024} * absl::GetFlag(FLAGS_chunk_kb) / sizeof(float);
  client_options.retry_timeout = absl::GetFlag(FLAGS_retry_timeout);
  // Servers may come up after the workers (pods start in any order).
  client_options.connect_timeout = client_options.retry_timeout;
  client_options.heartbeat_period = absl::GetFlag(FLAGS_heartbeat_period);
  absl::StatusOr<std::unique_ptr<ParameterClient>> client =
      ParameterClient::Connect(*servers, &*partition, client_options);
  if (!client.ok()) return fail(client.status());
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
  options.save_model_path = *rank == 0 ? absl::GetFlag(FLAGS_save_model) : "";
  options.slowdown = absl::Milliseconds(absl::GetFlag(FLAGS_slowdown_ms));
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(options, client->get(), mlp->get(), &*train,
                      *rank == 0 ? &*test : nullptr);
  if (!trainer.ok()) return fail(trainer.status());

  // A fresh id per process, so a shard can tell a restarted worker.
  const uint64_t incarnation = absl::Uniform<uint64_t>(absl::BitGen());
  absl::StatusOr<RegisterInfo> info =
      (*client)->Register(incarnation, (*trainer)->planned_steps());
  if (!info.ok()) return fail(info.status());
  const std::string expected_mode = absl::GetFlag(FLAGS_mode);
  if (!expected_mode.empty() && expected_mode != info->mode) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "--mode=", expected_mode, " but the servers run ", info->mode)));
  }
  if (info->num_workers != num_workers) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("--num_workers=", num_workers, " but the servers expect ",
                     info->num_workers)));
  }
  spdlog::info("registered with {} servers: mode {}, {} workers, device {}",
               servers->size(), info->mode, num_workers, (*backend)->name());

  absl::StatusOr<TrainingSummary> summary = (*trainer)->Run(*info);
  if (!summary.ok()) return fail(summary.status());

  absl::Status done = (*client)->Done();
  if (!done.ok()) return fail(done);
  spdlog::info("trained {} steps on {} examples in {}, last loss {:.4f}",
               summary->steps, summary->examples,
               absl::FormatDuration(summary->wall_time), summary->final_loss);
  if (*rank == 0) {
    // The launcher reads this line.
    spdlog::info("final test accuracy: {:.4f}", summary->test_accuracy);
  }
  return 0;
}

}  // namespace
}  // namespace ps::worker

int main(int argc, char** argv) {
  ps::KeepFreedMemory();
  absl::SetProgramUsageMessage(
      "Trains its shard of Fashion-MNIST against the parameter servers.");
  absl::ParseCommandLine(argc, argv);
  return ps::worker::Run();
}
