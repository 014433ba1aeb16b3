// Experiments behind issue 3's figures, on the real binaries and data:
//
//   bazel run //tests:experiments -- --experiment=faults --epochs=3
//     final test accuracy of a fault-free run against runs where a worker
//     (async, sync/elastic) or a server (sync, from its checkpoint) is
//     killed with SIGKILL mid-run and restarted;
//   bazel run //tests:experiments -- --experiment=modes
//     with worker 1 of 2 slowed 3x, the wall time sync, ssp (s=2) and async
//     take to reach a test accuracy (default 0.85).
//
// Prints one table. Takes minutes: not a test.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/progress_line.h"
#include "tests/cluster_runner.h"
#include "tests/process_cluster.h"

ABSL_FLAG(std::string, experiment, "faults", "faults or modes");
ABSL_FLAG(int, epochs, 3, "Epochs per run");
ABSL_FLAG(double, target_accuracy, 0.85, "modes: accuracy to reach");
ABSL_FLAG(int, slowdown_ms, 50,
          "modes: extra sleep per step of worker 1 (about 2x a step here, "
          "so that worker runs 3x slower)");
ABSL_FLAG(std::string, work_dir, "/tmp/ps_experiments", "Scratch directory");

namespace ps::testing {
namespace {

constexpr absl::Duration kRunTimeout = absl::Minutes(20);

LaunchConfig Job(const std::string& mode) {
  LaunchConfig config = SmallJob();
  config.mode = mode;
  config.epochs = absl::GetFlag(FLAGS_epochs);
  config.batch_size = 64;
  config.optimizer = "adam";
  config.learning_rate = 0.001;
  config.extra_server_flags = {"--worker_timeout=3s"};
  config.extra_worker_flags = {"--log_every=50"};
  return config;
}

struct RunResult {
  bool ok = false;
  double accuracy = -1;
  double seconds = 0;
  std::vector<std::string> worker0_lines;
};

// Waits for every process; ok when all exit 0.
RunResult Finish(ProcessCluster& cluster, absl::Time start) {
  RunResult result;
  result.ok = true;
  for (int r = 0; r < cluster.config().num_workers; ++r) {
    std::optional<ExitStatus> status = cluster.WaitWorker(r, kRunTimeout);
    result.ok &= status.has_value() && status->success();
  }
  for (int s = 0; s < cluster.config().num_servers; ++s) {
    std::optional<ExitStatus> status = cluster.WaitServer(s, absl::Seconds(90));
    result.ok &= status.has_value() && status->success();
  }
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result.worker0_lines = cluster.WorkerLines(0);
  const std::optional<FinalAccuracy> final_accuracy =
      LastProgressOf<FinalAccuracy>(result.worker0_lines);
  result.accuracy = final_accuracy.has_value() ? final_accuracy->accuracy : -1;
  return result;
}

enum class Fault { kNone, kWorker, kServer };

RunResult FaultRun(const std::string& mode, Fault fault) {
  LaunchConfig config = Job(mode);
  const std::string checkpoints =
      absl::StrCat(absl::GetFlag(FLAGS_work_dir), "/checkpoints-", mode, "-",
                   static_cast<int>(fault));
  std::filesystem::remove_all(checkpoints);
  std::filesystem::create_directories(checkpoints);
  config.checkpoint_dir = checkpoints;
  config.extra_server_flags.push_back("--checkpoint_every_steps=100");
  ProcessCluster cluster(config);
  const absl::Time start = absl::Now();
  if (!cluster.StartAllServers().ok() || !cluster.StartAllWorkers().ok()) {
    return RunResult{};
  }
  // Mid-run: half way through the first epoch (469 steps of batch 64 each).
  const std::string midway = " step 250/";
  // A killed worker is watched itself: in async mode the other one may be
  // far ahead of it.
  const int watched = fault == Fault::kWorker ? 1 : 0;
  if (fault != Fault::kNone &&
      cluster.AwaitWorkerLine(watched, midway, kRunTimeout).ok()) {
    if (fault == Fault::kWorker) {
      cluster.KillWorker(1);
      absl::SleepFor(absl::Seconds(5));  // Past --worker_timeout.
      cluster.StartWorker(1).IgnoreError();
    } else {
      cluster.KillServer(1);
      absl::SleepFor(absl::Seconds(2));
      cluster.StartServer(1).IgnoreError();
    }
  }
  return Finish(cluster, start);
}

// Seconds from the start of training to worker 0's first evaluation at or
// above `target`.
std::optional<double> TimeToAccuracy(const std::vector<std::string>& lines,
                                     double target) {
  for (const std::string& line : lines) {
    const std::optional<ProgressLine> progress =
        ParseProgressLine(InfoMessageOf(line));
    if (!progress.has_value()) continue;
    const auto* eval = std::get_if<EvalProgress>(&*progress);
    if (eval != nullptr && eval->accuracy >= target) return eval->seconds;
  }
  return std::nullopt;
}

int RunFaults() {
  struct Row {
    const char* name;
    std::string mode;
    Fault fault;
  };
  const std::vector<Row> rows = {
      {"sync, no fault", "sync", Fault::kNone},
      {"sync/elastic, worker 1 killed + restarted", "sync", Fault::kWorker},
      {"sync, server 1 killed + restored", "sync", Fault::kServer},
      {"async, no fault", "async", Fault::kNone},
      {"async, worker 1 killed + restarted", "async", Fault::kWorker},
  };
  std::printf("\n%-44s %-8s %10s %9s\n", "run", "finished", "accuracy",
              "seconds");
  for (const Row& row : rows) {
    RunResult r = FaultRun(row.mode, row.fault);
    std::printf("%-44s %-8s %10.4f %9.1f\n", row.name, r.ok ? "yes" : "NO",
                r.accuracy, r.seconds);
    std::fflush(stdout);
  }
  return 0;
}

int RunModes() {
  const double target = absl::GetFlag(FLAGS_target_accuracy);
  std::printf(
      "\nworker 1 of 2 slowed by %d ms a step; time to %.2f test "
      "accuracy\n%-12s %12s %10s %12s\n",
      absl::GetFlag(FLAGS_slowdown_ms), target, "mode", "to target s",
      "final acc", "total s");
  for (const auto& [name, mode, staleness] :
       std::vector<std::tuple<std::string, std::string, int>>{
           {"sync", "sync", 0}, {"ssp s=2", "ssp", 2}, {"async", "async", 0}}) {
    LaunchConfig config = Job(mode);
    config.staleness = staleness;
    config.extra_worker_flags.push_back("--eval_every=50");
    ProcessCluster cluster(config);
    const absl::Time start = absl::Now();
    if (!cluster.StartAllServers().ok() || !cluster.StartWorker(0).ok() ||
        !cluster
             .StartWorker(1, {absl::StrCat("--slowdown_ms=",
                                           absl::GetFlag(FLAGS_slowdown_ms))})
             .ok()) {
      std::printf("%-12s failed to start\n", name.c_str());
      continue;
    }
    RunResult r = Finish(cluster, start);
    std::optional<double> reached = TimeToAccuracy(r.worker0_lines, target);
    std::printf("%-12s %12s %10.4f %12.1f\n", name.c_str(),
                reached.has_value() ? absl::StrFormat("%.1f", *reached).c_str()
                                    : "not reached",
                r.accuracy, r.seconds);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace ps::testing

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::filesystem::create_directories(absl::GetFlag(FLAGS_work_dir));
  // The cluster helpers find binaries and scratch space as a test would.
  setenv("TEST_TMPDIR",
         absl::StrCat(absl::GetFlag(FLAGS_work_dir), "/").c_str(), 1);
  if (getenv("TEST_SRCDIR") == nullptr) {
    setenv("TEST_SRCDIR", absl::StrCat(argv[0], ".runfiles").c_str(), 1);
  }
  const std::string experiment = absl::GetFlag(FLAGS_experiment);
  if (experiment == "faults") return ps::testing::RunFaults();
  if (experiment == "modes") return ps::testing::RunModes();
  std::fprintf(stderr, "--experiment must be faults or modes, got %s\n",
               experiment.c_str());
  return 2;
}
