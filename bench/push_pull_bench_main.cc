// Push+pull throughput of one worker against 1 and 2 shard processes, next
// to what this machine does without us: memcpy, a plain TCP stream over
// 127.0.0.1 and a raw gRPC streaming echo. See bench/README.md.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/bench_flags.h"
#include "bench/bench_runner.h"
#include "bench/push_pull.h"
#include "common/cpu_affinity.h"
#include "common/malloc_tuning.h"

ABSL_FLAG(std::string, sizes, "4K,1M,16M,64M",
          "Model sizes in bytes of float32, K/M/G binary suffixes.");
ABSL_FLAG(std::string, servers, "1,2", "Server counts to run each size with.");
ABSL_FLAG(std::string, transports, "local,grpc",
          "How ours reaches the shards, a row each: local (the same-host "
          "transport, a Unix socket: what workers on the servers' host use) "
          "and grpc (gRPC over TCP, as from another host).");
ABSL_FLAG(int, rounds, 2, "Minimum timed rounds per trial.");
ABSL_FLAG(int, trials, 3, "Timed trials per measurement; the median counts.");
ABSL_FLAG(int, warmup, 2, "Untimed rounds before each measurement.");
ABSL_FLAG(int, min_time_ms, 400,
          "Minimum time per trial; 0 runs exactly --rounds.");
ABSL_FLAG(int, chunk_kb, 1024,
          "Our stream chunk in KiB (ClientOptions.chunk_elements * 4).");
ABSL_FLAG(int, echo_chunk_kb, 1024, "The gRPC echo baseline's chunk in KiB.");
ABSL_FLAG(std::string, optimizer, "sgd",
          "Shards' optimizer: sgd (momentum 0, cheapest) or adam.");
ABSL_FLAG(std::string, update_log, "none",
          "Shards' checkpoints and update log: on (checkpoints in a fresh "
          "directory, every update logged first, as a launched job's shards "
          "do), off (checkpoints, --update_log=false) or none (no "
          "--checkpoint_dir).");
ABSL_FLAG(bool, baselines, true,
          "Measure memcpy, TCP and gRPC echo too; false leaves them 0 (for "
          "profiling ours alone).");
ABSL_FLAG(bool, shard_reports, false,
          "After each row, print the shards' own final reports (their push "
          "and pull latencies), for profiling.");
ABSL_FLAG(std::string, worker_cpus, "",
          "CPUs of this process, the worker (kernel list format, \"0\", "
          "\"0-3\"); empty: any, or half of them with --split_cpus.");
ABSL_FLAG(std::string, server_cpus, "",
          "CPUs of the shards (their --cpus) and of the baselines' receiving "
          "ends (TCP reader, echo server); empty: any, or half of them with "
          "--split_cpus.");
ABSL_FLAG(bool, split_cpus, true,
          "Unless --worker_cpus or --server_cpus is given: run the worker on "
          "the first half of the CPUs this process may use and the shards and "
          "the receiving ends on the other half, as on separate machines; "
          "false leaves everything to the scheduler.");
ABSL_FLAG(std::string, server_binary, "",
          "Path of //server:server; empty: found in this binary's runfiles.");

namespace ps::bench {
namespace {

absl::StatusOr<BenchConfig> ConfigFromFlags(const char* argv0) {
  BenchConfig config;
  absl::StatusOr<std::vector<uint64_t>> sizes =
      ParseSizes(absl::GetFlag(FLAGS_sizes));
  if (!sizes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sizes: ", sizes.status().message()));
  }
  config.sizes = *sizes;
  absl::StatusOr<std::vector<int>> servers =
      ParseServerCounts(absl::GetFlag(FLAGS_servers));
  if (!servers.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--servers: ", servers.status().message()));
  }
  config.server_counts = *servers;
  absl::StatusOr<std::vector<bool>> transports =
      ParseTransports(absl::GetFlag(FLAGS_transports));
  if (!transports.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--transports: ", transports.status().message()));
  }
  config.transports = *transports;
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int trials = absl::GetFlag(FLAGS_trials);
  const int min_time_ms = absl::GetFlag(FLAGS_min_time_ms);
  const int chunk_kb = absl::GetFlag(FLAGS_chunk_kb);
  const int echo_chunk_kb = absl::GetFlag(FLAGS_echo_chunk_kb);
  for (absl::Status s :
       {CheckFlagRange("rounds", rounds, 1, 1000000),
        CheckFlagRange("warmup", warmup, 0, 1000),
        CheckFlagRange("trials", trials, 1, 1000),
        CheckFlagRange("min_time_ms", min_time_ms, 0, 600000),
        CheckFlagRange("chunk_kb", chunk_kb, 1, 32 << 10),
        CheckFlagRange("echo_chunk_kb", echo_chunk_kb, 1, 32 << 10)}) {
    if (!s.ok()) return s;
  }
  config.measure.min_rounds = rounds;
  config.measure.warmup_rounds = warmup;
  config.measure.trials = trials;
  config.baselines = absl::GetFlag(FLAGS_baselines);
  config.measure.min_time = absl::Milliseconds(min_time_ms);
  config.push_pull.chunk_bytes = static_cast<uint64_t>(chunk_kb) << 10;
  config.echo_chunk_bytes = static_cast<uint64_t>(echo_chunk_kb) << 10;
  config.push_pull.optimizer = absl::GetFlag(FLAGS_optimizer);
  config.push_pull.update_log = absl::GetFlag(FLAGS_update_log);
  if (config.push_pull.update_log != "on" &&
      config.push_pull.update_log != "off" &&
      config.push_pull.update_log != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--update_log must be on, off or none, got \"",
                     config.push_pull.update_log, "\""));
  }
  if (config.push_pull.optimizer != "sgd" &&
      config.push_pull.optimizer != "adam") {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer must be sgd or adam, got \"",
                     config.push_pull.optimizer, "\""));
  }
  absl::StatusOr<std::vector<int>> worker_cpus =
      CpusFromFlag("worker_cpus", absl::GetFlag(FLAGS_worker_cpus));
  if (!worker_cpus.ok()) return worker_cpus.status();
  config.worker_cpus = *std::move(worker_cpus);
  absl::StatusOr<std::vector<int>> server_cpus =
      CpusFromFlag("server_cpus", absl::GetFlag(FLAGS_server_cpus));
  if (!server_cpus.ok()) return server_cpus.status();
  config.push_pull.server_cpus = *std::move(server_cpus);
  if (config.worker_cpus.empty() && config.push_pull.server_cpus.empty() &&
      absl::GetFlag(FLAGS_split_cpus)) {
    CpuSplit split = SplitCpus(UsableCpus());
    config.worker_cpus = std::move(split.worker);
    config.push_pull.server_cpus = std::move(split.servers);
  }
  config.push_pull.server_binary = absl::GetFlag(FLAGS_server_binary);
  if (config.push_pull.server_binary.empty()) {
    config.push_pull.server_binary = FindServerBinary(argv0);
    if (config.push_pull.server_binary.empty()) {
      return absl::NotFoundError(
          "cannot find the server binary next to this one; run through "
          "`bazel run //bench:push_pull_bench` or pass --server_binary");
    }
  } else if (access(config.push_pull.server_binary.c_str(), X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server_binary ", config.push_pull.server_binary,
                     " is not an executable file"));
  }
  return config;
}

std::string CpusText(const std::vector<int>& cpus) {
  return cpus.empty() ? "any" : FormatCpuList(cpus);
}

int Run(const char* argv0) {
  absl::StatusOr<BenchConfig> config = ConfigFromFlags(argv0);
  if (!config.ok()) {
    std::fprintf(stderr, "push_pull_bench: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  if (!config->worker_cpus.empty()) {
    if (absl::Status s = RestrictProcessToCpus(config->worker_cpus); !s.ok()) {
      std::fprintf(stderr, "push_pull_bench: --worker_cpus: %s\n",
                   std::string(s.message()).c_str());
      return 2;
    }
  }
  if (!config->push_pull.server_cpus.empty()) {
    // Checked now, on a thread of its own, rather than by the first
    // measurement that places something there.
    absl::Status usable;
    std::thread([&] {
      usable = RestrictThreadToCpus(config->push_pull.server_cpus);
    }).join();
    if (!usable.ok()) {
      std::fprintf(stderr, "push_pull_bench: --server_cpus: %s\n",
                   std::string(usable.message()).c_str());
      return 2;
    }
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  if (tmp == nullptr) tmp = std::getenv("TMPDIR");
  std::string work_dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/push_pull_bench.XXXXXX");
  if (mkdtemp(work_dir.data()) == nullptr) {
    std::perror("push_pull_bench: mkdtemp");
    return 1;
  }
  config->push_pull.work_dir = work_dir;

  std::printf(
      "push+pull: 1 worker (this process, ParameterClient, %d KiB chunks) "
      "against separate `server` processes (%s), --mode=async, "
      "--optimizer=%s%s; model = MLP a-b whose weight and bias hold the size "
      "exactly.\nbaselines: memcpy and a TCP stream over 127.0.0.1 count the "
      "size once a round; ours and the gRPC echo (in-process server, %d KiB "
      "chunks, upload then download) count 2 x size.\nours: one PushPull "
      "call per shard a round, as a training step makes; 2 calls: a Push then "
      "a Pull call; push/pull: the 2 calls' directions timed alone; via: "
      "local (the same-host transport) or grpc (gRPC over TCP).\nGB/s = "
      "1e9 bytes/s; cpu (of ours): CPU ns per byte moved "
      "(ours: worker + shards; the others: this process), steadier than GB/s "
      "when other load competes for the cores.\nCPUs: the worker (and the "
      "senders of the baselines) %s; the shards (and the receivers) %s.\n"
      "Median of %d trials of >= %d rounds and >= %d ms.\n\n",
      absl::GetFlag(FLAGS_chunk_kb), config->push_pull.server_binary.c_str(),
      config->push_pull.optimizer.c_str(),
      config->push_pull.optimizer == "sgd" ? " --momentum=0" : "",
      absl::GetFlag(FLAGS_echo_chunk_kb), CpusText(config->worker_cpus).c_str(),
      CpusText(config->push_pull.server_cpus).c_str(), config->measure.trials,
      config->measure.min_rounds, absl::GetFlag(FLAGS_min_time_ms));
  std::printf("%s\n", TableHeader().c_str());
  std::fflush(stdout);
  const bool shard_reports = absl::GetFlag(FLAGS_shard_reports);
  absl::Status status = RunBench(*config, [&](const BenchRow& row) {
    std::printf("%s\n", TableRow(row).c_str());
    if (shard_reports) {
      for (const ps::server::ShardReport& report : row.shard_reports) {
        std::printf("%s", ps::server::FormatShardReport(report).c_str());
      }
    }
    std::fflush(stdout);
  });
  // The shards' checkpoints and update logs: gigabytes after the 16 MiB rows.
  std::error_code ignored;
  std::filesystem::remove_all(work_dir, ignored);
  if (!status.ok()) {
    std::fprintf(stderr, "push_pull_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ps::bench

int main(int argc, char** argv) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(
      "Push+pull throughput against shard processes, with memcpy, loopback "
      "TCP and gRPC echo baselines.\n"
      "  bazel run //bench:push_pull_bench -- --sizes=16M,64M");
  // This process is the worker, so it keeps freed memory as worker_main
  // does (the baselines run under the same setting).
  ps::KeepFreedMemory();
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "push_pull_bench: unexpected argument \"%s\"\n",
                 rest[1]);
    return 2;
  }
  return ps::bench::Run(argv[0]);
}
