#include "bench/push_pull.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/parameter_client.h"
#include "common/cpu_affinity.h"
#include "common/model_spec.h"
#include "common/subprocess.h"
#include "server/shard_report.h"

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

// Where shard `index` writes its report at its exit.
std::string ReportFile(const PushPullOptions& options, int index) {
  return absl::StrCat(options.work_dir, "/shard", index, "_of_",
                      options.num_servers, ".report");
}

// The shards hold what the client declares.
absl::StatusOr<Shards> StartShards(const PushPullOptions& options) {
  Shards shards;
  for (int i = 0; i < options.num_servers; ++i) {
    const std::string port_file = absl::StrCat(
        options.work_dir, "/shard", i, "_of_", options.num_servers, ".port");
    unlink(port_file.c_str());  // A stale file would name a dead port.
    // Nor may a stale report be taken for this shard's.
    unlink(ReportFile(options, i).c_str());
    const std::string host = options.shard_hosts.empty()
                                 ? std::string("127.0.0.1")
                                 : options.shard_hosts[i];
    SubprocessOptions sub;
    sub.argv = {options.server_binary,
                absl::StrCat("--server_index=", i),
                absl::StrCat("--num_servers=", options.num_servers),
                "--num_workers=1",
                "--mode=async",
                absl::StrCat("--optimizer=", options.optimizer),
                absl::StrCat("--host=", host),
                "--port=0",
                absl::StrCat("--port_file=", port_file),
                absl::StrCat("--report_file=", ReportFile(options, i)),
                absl::StrCat("--local_transport=",
                             options.local_transport ? "true" : "false")};
    // A worker on another host (cross_host_bench) reaches it as frames
    // over TCP.
    if (options.local_transport) sub.argv.push_back("--tcp_data_port=0");
    if (options.optimizer == "sgd") sub.argv.push_back("--momentum=0");
    if (options.update_log == "on" || options.update_log == "off") {
      const std::string dir = absl::StrCat(options.work_dir, "/checkpoints");
      // A fresh shard refuses a directory holding checkpoints of its own.
      if (i == 0) std::filesystem::remove_all(dir);
      sub.argv.push_back(absl::StrCat("--checkpoint_dir=", dir));
      sub.argv.push_back(
          absl::StrCat("--update_log=", options.update_log == "on"));
    }
    if (!options.server_cpus.empty()) {
      sub.argv.push_back(
          absl::StrCat("--cpus=", FormatCpuList(options.server_cpus)));
    }
    sub.name = absl::StrCat("server ", i);
    sub.max_kept_lines = 200;
    absl::StatusOr<std::unique_ptr<Subprocess>> process =
        options.start_shard ? options.start_shard(i, std::move(sub))
                            : Subprocess::Start(std::move(sub));
    if (!process.ok()) return process.status();
    absl::StatusOr<int> port =
        WaitForPortFile(port_file, options.start_timeout, process->get());
    if (!port.ok()) return port.status();
    unlink(port_file.c_str());
    shards.addresses.push_back(absl::StrCat(host, ":", *port));
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
  if (!options.shard_hosts.empty() &&
      options.shard_hosts.size() != static_cast<size_t>(options.num_servers)) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.shard_hosts.size(), " shard hosts for ",
                     options.num_servers, " servers"));
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
  const ModelSpec model = MlpModelSpec(*layers);

  absl::StatusOr<Shards> shards = StartShards(options);
  if (!shards.ok()) return shards.status();

  ClientOptions client_options;
  client_options.servers = shards->addresses;
  client_options.chunk_elements = options.chunk_bytes / 4;
  client_options.connect_timeout = options.start_timeout;
  client_options.retry_timeout = options.start_timeout;
  client_options.local_transport = options.local_transport;
  client_options.compression = options.compression;
  absl::StatusOr<std::unique_ptr<ParameterClient>> client =
      ParameterClient::Connect(client_options);
  if (!client.ok()) return client.status();
  // planned_steps only shapes the shards' learning-rate schedule.
  absl::StatusOr<Registration> registration =
      (*client)->Declare(model, /*planned_steps=*/1000000);
  if (!registration.ok()) return registration.status();

  TensorValues gradients;
  for (const TensorSpec& t : model.tensors) {
    // Small enough that the weights stay finite whatever the rounds.
    gradients.emplace_back(t.num_elements(), 1e-6f);
  }
  TensorValues weights;
  uint64_t step = registration->next_step;
  // The first step's base version; not timed.
  absl::StatusOr<uint64_t> version = (*client)->Pull(step, weights);
  if (!version.ok()) return version.status();
  auto next_step_info = [&] {
    StepInfo info;
    info.step = step;
    info.base_version = *version;
    info.num_examples = 1;
    info.cursor.examples_done = step + 1;  // Progress after this batch.
    return info;
  };
  absl::Duration push_time;
  absl::Duration pull_time;
  int rounds_done = 0;
  auto two_calls = [&]() -> absl::Status {
    // MeasureRounds runs the warm-up rounds first; they do not count.
    if (rounds_done++ == measure.warmup_rounds) {
      push_time = pull_time = absl::ZeroDuration();
    }
    const StepInfo info = next_step_info();
    const absl::Time start = absl::Now();
    if (absl::Status s = (*client)->Push(info, gradients); !s.ok()) {
      return s;
    }
    const absl::Time pushed = absl::Now();
    ++step;
    version = (*client)->Pull(step, weights);
    if (!version.ok()) return version.status();
    push_time += pushed - start;
    pull_time += absl::Now() - pushed;
    return absl::OkStatus();
  };
  auto push_pull = [&]() -> absl::Status {
    std::unique_ptr<StepPush> push =
        (*client)->StartStep(next_step_info(), /*pull_after=*/true);
    for (size_t t = 0; t < gradients.size(); ++t) {
      if (absl::Status s = push->Send(static_cast<int>(t), gradients[t]);
          !s.ok()) {
        return s;
      }
    }
    version = push->FinishWithPull(weights);
    if (!version.ok()) return version.status();
    ++step;
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
  absl::StatusOr<Measurement> separate = Measurement();
  if (options.measure_two_calls) {
    separate =
        MeasureRounds(measure, 2 * options.size_bytes, two_calls, cpu_clock);
    if (!separate.ok()) return separate.status();
  }
  absl::StatusOr<Measurement> fused =
      MeasureRounds(measure, 2 * options.size_bytes, push_pull, cpu_clock);
  if (!fused.ok()) return fused.status();
  PushPullResult result;
  result.round_trip = *fused;
  result.two_calls = *separate;
  // Over every timed round of every trial, not just the median one.
  if (options.measure_two_calls) {
    const uint64_t one_way =
        options.size_bytes *
        static_cast<uint64_t>(rounds_done - measure.warmup_rounds);
    result.push_gbps = Gbps(one_way, push_time);
    result.pull_gbps = Gbps(one_way, pull_time);
  }
  if (absl::Status s = (*client)->Finish(); !s.ok()) return s;
  // A shard waits out its shutdown grace (5 s) while a client still holds
  // its channel open, so close ours first.
  client->reset();
  if (absl::Status s = WaitForCleanExit(*shards); !s.ok()) return s;
  for (int i = 0; i < options.num_servers; ++i) {
    const std::string path = ReportFile(options, i);
    absl::StatusOr<server::ShardReport> report = server::ReadShardReport(path);
    unlink(path.c_str());
    if (!report.ok()) return report.status();
    result.shard_reports.push_back(*std::move(report));
  }
  return result;
}

}  // namespace ps::bench
