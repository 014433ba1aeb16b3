#include "bench/push_pull.h"

#include <unistd.h>

#include <cmath>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/cpu_affinity.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "common/subprocess.h"
#include "worker/ps_client.h"

namespace ps::bench {
namespace {

constexpr int kMaxLayerSize = 1 << 20;
constexpr absl::Duration kExitTimeout = absl::Seconds(15);
constexpr size_t kLogLinesInErrors = 20;

// The shard processes of one measurement; killed by their destructors if
// they outlive it.
struct Shards {
  std::vector<std::unique_ptr<Subprocess>> processes;
  std::vector<std::string> addresses;
};

absl::StatusOr<Shards> StartShards(const PushPullOptions& options,
                                   const std::vector<int>& layers) {
  Shards shards;
  const std::string model = absl::StrJoin(layers, "-");
  for (int i = 0; i < options.num_servers; ++i) {
    const std::string port_file = absl::StrCat(
        options.work_dir, "/shard", i, "_of_", options.num_servers, ".port");
    unlink(port_file.c_str());  // A stale file would name a dead port.
    SubprocessOptions sub;
    sub.argv = {options.server_binary,
                absl::StrCat("--server_index=", i),
                absl::StrCat("--num_servers=", options.num_servers),
                "--num_workers=1",
                absl::StrCat("--model=", model),
                "--mode=async",
                absl::StrCat("--optimizer=", options.optimizer),
                "--host=127.0.0.1",
                "--port=0",
                absl::StrCat("--port_file=", port_file)};
    if (options.optimizer == "sgd") sub.argv.push_back("--momentum=0");
    if (!options.server_cpus.empty()) {
      sub.argv.push_back(
          absl::StrCat("--cpus=", FormatCpuList(options.server_cpus)));
    }
    sub.name = absl::StrCat("server ", i);
    sub.max_kept_lines = 200;
    absl::StatusOr<std::unique_ptr<Subprocess>> process =
        Subprocess::Start(std::move(sub));
    if (!process.ok()) return process.status();
    absl::StatusOr<int> port =
        WaitForPortFile(port_file, options.start_timeout, process->get());
    if (!port.ok()) return port.status();
    unlink(port_file.c_str());
    shards.addresses.push_back(absl::StrCat("127.0.0.1:", *port));
    shards.processes.push_back(*std::move(process));
  }
  return shards;
}

absl::Status WaitForCleanExit(Shards& shards) {
  for (std::unique_ptr<Subprocess>& p : shards.processes) {
    std::optional<ExitStatus> exit = p->WaitFor(kExitTimeout);
    if (!exit.has_value()) {
      return absl::DeadlineExceededError(
          absl::StrCat(p->name(), " did not exit after the worker's Done:\n",
                       p->LastLines(kLogLinesInErrors)));
    }
    if (!exit->success()) {
      return absl::InternalError(absl::StrCat(p->name(), " ", exit->ToString(),
                                              ":\n",
                                              p->LastLines(kLogLinesInErrors)));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateOptions(const PushPullOptions& options) {
  if (options.server_binary.empty()) {
    return absl::InvalidArgumentError("no server binary given");
  }
  if (options.num_servers < 1 || options.num_servers > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("servers must be in [1, 64], got ", options.num_servers));
  }
  if (options.chunk_bytes < 4 || options.chunk_bytes % 4 != 0 ||
      options.chunk_bytes > (32 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk must be a multiple of 4 bytes in [4, 32 MiB], got ",
                     options.chunk_bytes));
  }
  if (options.optimizer != "sgd" && options.optimizer != "adam") {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer must be sgd or adam, got \"", options.optimizer, "\""));
  }
  if (options.work_dir.empty()) {
    return absl::InvalidArgumentError("no work directory given");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int>> MlpLayersForBytes(uint64_t size_bytes) {
  if (size_bytes % 4 != 0 || size_bytes < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("size ", size_bytes,
                     " bytes is not a multiple of 4 bytes of at least 8 "
                     "(two float32)"));
  }
  const uint64_t n = size_bytes / 4;
  for (uint64_t b = static_cast<uint64_t>(std::sqrt(static_cast<double>(n)));
       b >= 1; --b) {
    if (n % b != 0) continue;
    const uint64_t a = n / b - 1;
    if (a >= 1 && a <= kMaxLayerSize && b <= kMaxLayerSize) {
      return std::vector<int>{static_cast<int>(a), static_cast<int>(b)};
    }
    if (a > kMaxLayerSize) break;  // Smaller b only makes a larger.
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "size ", size_bytes, " bytes cannot be an MLP a-b with (a + 1) * b = ", n,
      " floats and a, b <= ", kMaxLayerSize));
}

absl::StatusOr<PushPullResult> MeasurePushPull(const MeasureOptions& measure,
                                               const PushPullOptions& options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  absl::StatusOr<std::vector<int>> layers =
      MlpLayersForBytes(options.size_bytes);
  if (!layers.ok()) return layers.status();
  // Built exactly as the server builds it from --model, so the partition
  // fingerprints agree.
  absl::StatusOr<Partition> partition =
      Partition::Create(MlpModelSpec(*layers), options.num_servers);
  if (!partition.ok()) return partition.status();

  absl::StatusOr<Shards> shards = StartShards(options, *layers);
  if (!shards.ok()) return shards.status();

  worker::ClientOptions client_options;
  client_options.chunk_elements = options.chunk_bytes / 4;
  client_options.connect_timeout = options.start_timeout;
  client_options.retry_timeout = options.start_timeout;
  absl::StatusOr<std::unique_ptr<worker::ParameterClient>> client =
      worker::ParameterClient::Connect(shards->addresses, &*partition,
                                       client_options);
  if (!client.ok()) return client.status();
  // planned_steps only shapes the shards' learning-rate schedule.
  absl::StatusOr<worker::RegisterInfo> info =
      (*client)->Register(/*incarnation=*/1, /*planned_steps=*/1000000);
  if (!info.ok()) return info.status();

  const ModelSpec& model = partition->model();
  std::vector<std::vector<float>> gradients;
  for (const TensorSpec& t : model.tensors) {
    // Small enough that the weights stay finite whatever the rounds.
    gradients.emplace_back(t.num_elements(), 1e-6f);
  }
  std::vector<std::vector<float>> weights;
  uint64_t step = info->next_step;
  uint64_t version = info->version;
  auto next_metadata = [&] {
    worker::PushMetadata metadata;
    metadata.step = step;
    metadata.base_version = version;
    metadata.num_examples = 1;
    metadata.examples_done = step + 1;  // Progress after this batch.
    return metadata;
  };
  absl::Duration push_time;
  absl::Duration pull_time;
  int rounds_done = 0;
  auto two_calls = [&]() -> absl::Status {
    // MeasureRounds runs the warm-up rounds first; they do not count.
    if (rounds_done++ == measure.warmup_rounds) {
      push_time = pull_time = absl::ZeroDuration();
    }
    const worker::PushMetadata metadata = next_metadata();
    const absl::Time start = absl::Now();
    if (absl::Status s = (*client)->Push(metadata, gradients); !s.ok()) {
      return s;
    }
    const absl::Time pushed = absl::Now();
    ++step;
    absl::StatusOr<uint64_t> pulled = (*client)->Pull(step, weights);
    if (!pulled.ok()) return pulled.status();
    version = *pulled;
    push_time += pushed - start;
    pull_time += absl::Now() - pushed;
    return absl::OkStatus();
  };
  auto push_pull = [&]() -> absl::Status {
    std::unique_ptr<worker::PushSession> session =
        (*client)->StartPushPull(next_metadata());
    for (uint32_t t = 0; t < gradients.size(); ++t) {
      if (absl::Status s = session->Send(t, gradients[t]); !s.ok()) return s;
    }
    absl::StatusOr<uint64_t> pulled = session->FinishWithPull(weights);
    if (!pulled.ok()) return pulled.status();
    ++step;
    version = *pulled;
    return absl::OkStatus();
  };
  // The worker (this process) plus every shard.
  auto cpu_clock = [&shards]() {
    absl::Duration total = ProcessCpuTime();
    for (const std::unique_ptr<Subprocess>& p : shards->processes) {
      absl::StatusOr<absl::Duration> cpu = OtherProcessCpuTime(p->pid());
      if (cpu.ok()) total += *cpu;
    }
    return total;
  };
  absl::StatusOr<Measurement> separate =
      MeasureRounds(measure, 2 * options.size_bytes, two_calls, cpu_clock);
  if (!separate.ok()) return separate.status();
  absl::StatusOr<Measurement> fused =
      MeasureRounds(measure, 2 * options.size_bytes, push_pull, cpu_clock);
  if (!fused.ok()) return fused.status();
  PushPullResult result;
  result.round_trip = *fused;
  result.two_calls = *separate;
  // Over every timed round of every trial, not just the median one.
  const uint64_t one_way =
      options.size_bytes *
      static_cast<uint64_t>(rounds_done - measure.warmup_rounds);
  result.push_gbps = Gbps(one_way, push_time);
  result.pull_gbps = Gbps(one_way, pull_time);
  if (absl::Status s = (*client)->Done(); !s.ok()) return s;
  // A shard waits out its shutdown grace (5 s) while a client still holds
  // its channel open, so close ours first.
  client->reset();
  if (absl::Status s = WaitForCleanExit(*shards); !s.ok()) return s;
  for (const std::unique_ptr<Subprocess>& p : shards->processes) {
    std::string report;
    bool in_report = false;
    for (const std::string& line : p->OutputLines()) {
      in_report = in_report || line.find("final report") != std::string::npos;
      if (in_report) absl::StrAppend(&report, line, "\n");
    }
    result.shard_reports.push_back(std::move(report));
  }
  return result;
}

}  // namespace ps::bench
