// The same job in sync-PS mode (servers on hosts of their own, or beside
// the workers) and in all-reduce mode (--mode=allreduce: a Gloo ring, no
// servers), on test hosts joined by shaped links (tests/hosts/test_hosts.h):
// time per step, bytes each worker's host sends and receives per step
// against 2 (N - 1) / N times the model, and the final test accuracy.
// Needs root (network namespaces); prints one Markdown row per run.
//
//   bazel run -c opt //bench:ring_vs_servers_bench -- --workers=2,4
//       --rates_mbit=1000,10000   (one command line)

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "bench/bench_flags.h"
#include "bench/host_bench.h"
#include "common/progress_line.h"
#include "common/subprocess.h"
#include "tests/hosts/test_hosts.h"

ABSL_FLAG(std::string, workers, "2", "Worker counts to run, comma-separated");
ABSL_FLAG(std::string, rates_mbit, "1000,10000",
          "Link rates in Mbit/s, comma-separated (0: unshaped)");
ABSL_FLAG(int, epochs, 1, "Epochs of each run");
ABSL_FLAG(int, batch_size, 64, "Batch per worker");
ABSL_FLAG(int, bucket_kb, 25600,
          "The ring's --allreduce_bucket_kb (a bucket larger than the model: "
          "one all-reduce after backward, no overlap)");
ABSL_FLAG(bool, ring_only, false, "Run the all-reduce mode only");
ABSL_FLAG(std::string, compression, "none",
          "The ring's --allreduce_compression (none or fp16)");

namespace ps::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Minutes(20);
// 784-256-128-10 in float32.
constexpr double kModelBytes =
    4.0 * ((784 * 256 + 256) + (256 * 128 + 128) + (128 * 10 + 10));

using Layout = ServiceLayout;

const char* LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kServersApart:
      return "sync-PS, 2 servers on hosts of their own";
    case Layout::kServersBeside:
      return "sync-PS, 2 servers beside workers 0 and 1";
    case Layout::kRing:
      return "allreduce (Gloo ring)";
  }
  return "";
}

struct Result {
  uint64_t steps = 0;
  double ms_per_step = 0;
  double sent_per_step = 0;  // Mean over the workers' hosts.
  double received_per_step = 0;
  double accuracy = -1;
  // Rank 0's compute / communication ms per step.
  std::string split;
};

std::optional<Result> RunJob(Layout layout, int num_workers,
                             int64_t bits_per_second) {
  const int num_hosts = HostsFor(layout, num_workers);
  const std::unique_ptr<TestHosts> made =
      CreateHosts(num_hosts, bits_per_second);
  if (made == nullptr) return std::nullopt;
  const TestHosts& hosts = *made;
  const std::vector<std::string> update = {
      "--optimizer=adam", "--learning_rate=0.001", "--lr_schedule=constant"};

  // Servers, or the ring's coordinator, each on its host.
  std::vector<std::unique_ptr<Subprocess>> services;
  const std::optional<std::vector<std::string>> addresses =
      StartServices(hosts, layout, num_workers, update, kTimeout, services);
  if (!addresses.has_value()) return std::nullopt;

  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int rank = 0; rank < num_workers; ++rank) {
    std::vector<std::string> argv = {
        RunfilePath("worker/worker"),
        absl::StrCat("--rank=", rank),
        absl::StrCat("--num_workers=", num_workers),
        absl::StrCat("--servers=", absl::StrJoin(*addresses, ",")),
        absl::StrCat("--batch_size=", absl::GetFlag(FLAGS_batch_size)),
        absl::StrCat("--epochs=", absl::GetFlag(FLAGS_epochs)),
        "--device=cpu",
        "--log_every=100"};
    if (layout == Layout::kRing) {
      argv.push_back("--mode=allreduce");
      argv.push_back(absl::StrCat("--allreduce_host=", hosts.address(rank)));
      argv.push_back(absl::StrCat("--allreduce_bucket_kb=",
                                  absl::GetFlag(FLAGS_bucket_kb)));
      argv.push_back(absl::StrCat("--allreduce_compression=",
                                  absl::GetFlag(FLAGS_compression)));
      argv.insert(argv.end(), update.begin(), update.end());
    } else {
      argv.push_back("--mode=sync");
    }
    workers.push_back(
        StartOn(hosts, rank, absl::StrCat("worker ", rank), argv));
    if (workers.back() == nullptr) return std::nullopt;
  }
  if (!AwaitWorkers(workers, kTimeout)) return std::nullopt;

  Result result;
  const std::vector<std::string> lines = workers[0]->OutputLines();
  const std::optional<TrainedSummary> trained =
      LastProgressOf<TrainedSummary>(lines);
  const std::optional<FinalAccuracy> accuracy =
      LastProgressOf<FinalAccuracy>(lines);
  if (!trained.has_value() || !accuracy.has_value() || trained->steps == 0) {
    std::fprintf(stderr, "worker 0 reported no training summary: %s\n",
                 workers[0]->LastLines(10).c_str());
    return std::nullopt;
  }
  result.steps = static_cast<uint64_t>(trained->steps);
  result.accuracy = accuracy->accuracy;
  result.ms_per_step = trained->seconds * 1e3 / trained->steps;
  if (const std::optional<StepTimeSplit> split =
          LastProgressOf<StepTimeSplit>(lines);
      split.has_value()) {
    result.split = absl::StrFormat("%.3f / %.3f", split->compute_ms,
                                   split->communication_ms);
  }
  for (int rank = 0; rank < num_workers; ++rank) {
    absl::StatusOr<TestHosts::LinkBytes> bytes = hosts.Bytes(rank);
    if (!bytes.ok()) return std::nullopt;
    result.sent_per_step += static_cast<double>(bytes->sent) / result.steps;
    result.received_per_step +=
        static_cast<double>(bytes->received) / result.steps;
  }
  result.sent_per_step /= num_workers;
  result.received_per_step /= num_workers;
  return result;
}

int Main() {
  const absl::StatusOr<bench::HostGrid> grid = bench::ParseHostGrid(
      absl::GetFlag(FLAGS_workers), absl::GetFlag(FLAGS_rates_mbit));
  if (!grid.ok()) {
    absl::FPrintF(stderr, "%s\n", grid.status().message());
    return 2;
  }
  if (const std::string why = TestHosts::WhyUnavailable(); !why.empty()) {
    std::fprintf(stderr, "no test hosts here: %s\n", why.c_str());
    return 1;
  }
  std::printf(
      "| workers | link | mode | steps | ms/step | rank 0: compute / "
      "communication ms | sent MB/step | received MB/step | 2(N-1)/N x model, "
      "MB | test accuracy |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const int num_workers : grid->workers) {
    for (const int64_t mbit : grid->rates_mbit) {
      for (Layout layout :
           {Layout::kServersApart, Layout::kServersBeside, Layout::kRing}) {
        if (absl::GetFlag(FLAGS_ring_only) && layout != Layout::kRing) continue;
        const std::optional<Result> result =
            RunJob(layout, num_workers, mbit * 1000 * 1000);
        const std::string link = bench::LinkRateName(mbit);
        if (!result.has_value()) {
          std::printf("| %d | %s | %s | failed |\n", num_workers, link.c_str(),
                      LayoutName(layout));
          continue;
        }
        std::printf(
            "| %d | %s | %s | %llu | %.2f | %s | %.3f | %.3f | %.3f | "
            "%.4f |\n",
            num_workers, link.c_str(), LayoutName(layout),
            static_cast<unsigned long long>(result->steps), result->ms_per_step,
            result->split.c_str(), result->sent_per_step / 1e6,
            result->received_per_step / 1e6,
            2.0 * (num_workers - 1) / num_workers * kModelBytes / 1e6,
            result->accuracy);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace ps::testing

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ps::testing::Main();
}
