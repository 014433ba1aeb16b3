// The PyTorch example's CNN (examples/pytorch_fashion_mnist.py, Adam,
// batch per worker) trained by paramserver.torch in sync-PS mode (2 servers
// on hosts of their own, or beside workers 0 and 1) and in --mode=allreduce
// (Gloo ring), and by PyTorch's own DistributedDataParallel (gloo backend),
// one worker per test host (tests/hosts/test_hosts.h) over shaped links:
// time per step, bytes each worker's host sends and receives per step
// against 2 (N - 1) / N times the model, and rank 0's test accuracy. The
// workers are bench/pytorch_ddp_bench.py's roles "ours" and "ddp". Needs
// root; prints one Markdown row per layout with the median of --repeats
// runs. Sync-PS runs once per --transports entry (gRPC, or the same-host
// transport's frames over TCP) and --compression entry; with --alternate,
// run r of every row comes before run r + 1 of any, so that load drift on a
// shared machine hits every row alike.
//
//   bazel build //python:paramserver
//   bazel run -c opt //bench:torch_ring_vs_ddp_bench -- --workers=2,4
//       --rates_mbit=1000,10000 --repeats=3   (one command line)
//   bazel run -c opt //bench:torch_ring_vs_ddp_bench -- --workers=2
//       --rates_mbit=1000 --transports=grpc,frames --ring=false --alternate

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "bench/bench_flags.h"
#include "bench/host_bench.h"
#include "common/flag_range.h"
#include "common/subprocess.h"
#include "tests/hosts/test_hosts.h"

ABSL_FLAG(std::string, workers, "2,4", "Worker counts, comma-separated");
ABSL_FLAG(std::string, rates_mbit, "1000,10000",
          "Link rates in Mbit/s, comma-separated (0: unshaped)");
ABSL_FLAG(int, repeats, 3, "Runs of each row; the row shows their medians");
ABSL_FLAG(int, steps, 100, "Timed steps of each run (after --warmup)");
ABSL_FLAG(int, warmup, 10, "Untimed steps first");
ABSL_FLAG(int, batch_size, 32, "Batch per worker");
ABSL_FLAG(int, eval_examples, 2000, "Test examples rank 0 evaluates on");
ABSL_FLAG(std::string, python, "/usr/bin/python3", "Debian's interpreter");
ABSL_FLAG(std::string, compression, "none",
          "Ours' paramserver.torch Compression (none, fp16, bf16), "
          "comma-separated: the sync-PS rows once for each");
ABSL_FLAG(std::string, transports, "grpc",
          "Ours' sync-PS transport, comma-separated: the sync-PS rows once "
          "for each. grpc: gRPC over TCP to every server, even one beside "
          "the worker (servers' --tcp_data_port=-1); frames: the same-host "
          "transport's frames over TCP to servers on other hosts and its "
          "Unix socket to one beside the worker (--tcp_data_port=0)");
ABSL_FLAG(bool, alternate, false,
          "Interleave the rows run by run (run 1 of every row, then run 2, "
          "...) instead of running each row's --repeats back to back");
ABSL_FLAG(bool, ring, true, "Measure ours in --mode=allreduce too");
ABSL_FLAG(std::string, python_site, "",
          "The built package's folder (empty: the workspace's "
          "bazel-bin/python/site)");

namespace ps::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Minutes(10);

// A row: a ServiceLayout of ours, or DDP (no services).
struct Layout {
  bool ddp = false;
  ServiceLayout services = ServiceLayout::kRing;
  std::string compression = "none";  // Sync-PS only.
  bool frames = false;               // Sync-PS only: else gRPC.
};

std::string BaseLayoutName(const Layout& layout) {
  if (layout.ddp) return "PyTorch DDP (gloo)";
  switch (layout.services) {
    case ServiceLayout::kServersApart:
      return "ours, sync-PS, 2 servers on hosts of their own";
    case ServiceLayout::kServersBeside:
      return "ours, sync-PS, 2 servers beside workers 0 and 1";
    case ServiceLayout::kRing:
      return "ours, --mode=allreduce (Gloo ring)";
  }
  return "";
}

std::string LayoutName(const Layout& layout) {
  std::string name = BaseLayoutName(layout);
  if (layout.ddp || layout.services == ServiceLayout::kRing) return name;
  absl::StrAppend(&name, layout.frames ? ", frames" : ", gRPC");
  if (layout.compression != "none") {
    absl::StrAppend(&name, ", ", layout.compression);
  }
  return name;
}

struct Result {
  double ms_per_step = 0;
  double bytes_per_step = 0;  // (sent + received) / 2, mean over workers.
  double model_bytes = 0;
  double accuracy = -1;
};

// `bazel run` starts the bench in its runfiles' workspace directory; the
// Python package is the one `bazel build //python:paramserver` made.
std::string Workspace(const std::string& relative) {
  if (const char* dir = std::getenv("BUILD_WORKSPACE_DIRECTORY")) {
    return absl::StrCat(dir, "/", relative);
  }
  return (std::filesystem::current_path() / relative).string();
}

// A number after "\"key\": " in rank 0's RESULT line.
std::optional<double> JsonNumber(const std::string& line,
                                 const std::string& key) {
  const std::string quoted = absl::StrCat("\"", key, "\": ");
  const size_t at = line.find(quoted);
  if (at == std::string::npos) return std::nullopt;
  const size_t begin = at + quoted.size();
  const size_t end = line.find_first_of(",}", begin);
  double value = 0;
  if (!absl::SimpleAtod(line.substr(begin, end - begin), &value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<Result> RunJob(const Layout& layout, int num_workers,
                             int64_t bits_per_second) {
  const int num_hosts =
      layout.ddp ? num_workers : HostsFor(layout.services, num_workers);
  const std::unique_ptr<TestHosts> made =
      CreateHosts(num_hosts, bits_per_second);
  if (made == nullptr) return std::nullopt;
  const TestHosts& hosts = *made;
  std::vector<std::unique_ptr<Subprocess>> services;
  std::vector<std::string> addresses;
  if (!layout.ddp) {
    std::optional<std::vector<std::string>> started = StartServices(
        hosts, layout.services, num_workers,
        {"--optimizer=adam", "--learning_rate=0.001", "--lr_schedule=constant",
         absl::StrCat("--tcp_data_port=", layout.frames ? 0 : -1)},
        kTimeout, services);
    if (!started.has_value()) return std::nullopt;
    addresses = *std::move(started);
  }
  const int steps = absl::GetFlag(FLAGS_steps);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int rank = 0; rank < num_workers; ++rank) {
    std::vector<std::string> argv = {
        absl::GetFlag(FLAGS_python), Workspace("bench/pytorch_ddp_bench.py"),
        layout.ddp ? "--role=ddp" : "--role=ours",
        absl::StrCat("--steps=", steps), absl::StrCat("--warmup=", warmup),
        absl::StrCat("--batch_size=", absl::GetFlag(FLAGS_batch_size)),
        absl::StrCat("--eval_examples=", absl::GetFlag(FLAGS_eval_examples)),
        // grpc: gRPC over TCP, as from another machine, even beside a
        // server. frames: the servers' frame endpoints.
        absl::StrCat("--local_transport=", layout.frames ? 1 : 0),
        absl::StrCat("--compression=", layout.compression)};
    std::vector<std::pair<std::string, std::string>> env = {
        {"PYTHONPATH", absl::GetFlag(FLAGS_python_site).empty()
                           ? Workspace("bazel-bin/python/site")
                           : absl::GetFlag(FLAGS_python_site)},
        {"OMP_NUM_THREADS", "1"},
        {"RANK", absl::StrCat(rank)},
        {"WORLD_SIZE", absl::StrCat(num_workers)}};
    if (layout.ddp) {
      env.push_back({"MASTER_ADDR", hosts.address(0)});
      env.push_back({"MASTER_PORT", "29500"});
      env.push_back({"GLOO_SOCKET_IFNAME", "eth0"});
    } else {
      env.push_back({"PS_RANK", absl::StrCat(rank)});
      env.push_back({"PS_NUM_WORKERS", absl::StrCat(num_workers)});
      env.push_back({"PS_LOCAL_RANK", "0"});
      env.push_back({"PS_LOCAL_NUM_WORKERS", "1"});
      env.push_back({"PS_SERVERS", absl::StrJoin(addresses, ",")});
      env.push_back({"PS_NUM_SERVERS", absl::StrCat(addresses.size())});
      if (layout.services == ServiceLayout::kRing) {
        env.push_back({"PS_MODE", "allreduce"});
        env.push_back({"PS_ALLREDUCE_HOST", hosts.address(rank)});
      }
    }
    workers.push_back(StartOn(hosts, rank, absl::StrCat("worker ", rank),
                              std::move(argv), std::move(env)));
    if (workers.back() == nullptr) return std::nullopt;
  }
  if (!AwaitWorkers(workers, kTimeout)) return std::nullopt;
  absl::StatusOr<std::string> line =
      workers[0]->WaitForOutputLine("RESULT ", absl::ZeroDuration());
  if (!line.ok()) return std::nullopt;
  const std::optional<double> rate = JsonNumber(*line, "steps_per_s");
  const std::optional<double> model = JsonNumber(*line, "model_bytes");
  if (!rate.has_value() || !model.has_value() || *rate <= 0) {
    std::fprintf(stderr, "cannot parse \"%s\"\n", line->c_str());
    return std::nullopt;
  }
  Result result;
  result.ms_per_step = 1000.0 / *rate;
  result.model_bytes = *model;
  result.accuracy = JsonNumber(*line, "accuracy").value_or(-1);
  for (int rank = 0; rank < num_workers; ++rank) {
    absl::StatusOr<TestHosts::LinkBytes> bytes = hosts.Bytes(rank);
    if (!bytes.ok()) return std::nullopt;
    result.bytes_per_step +=
        static_cast<double>(bytes->sent + bytes->received) / 2 /
        (steps + warmup);
  }
  result.bytes_per_step /= num_workers;
  return result;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one;
}

// A row's runs so far, and the load average as each began.
struct Row {
  Layout layout;
  std::vector<Result> results;
  std::vector<std::string> loads;
};

void PrintRow(const Row& row, int num_workers, const std::string& link) {
  const std::string name = LayoutName(row.layout);
  if (row.results.empty()) {
    std::printf("| %d | %s | %s | failed |\n", num_workers, link.c_str(),
                name.c_str());
    return;
  }
  std::vector<double> ms, bytes, accuracy;
  std::vector<std::string> each;
  for (const Result& result : row.results) {
    ms.push_back(result.ms_per_step);
    bytes.push_back(result.bytes_per_step);
    accuracy.push_back(result.accuracy);
    each.push_back(absl::StrFormat("%.1f", result.ms_per_step));
  }
  const double model = row.results.back().model_bytes;
  std::printf("| %d | %s | %s | %.1f; %s | %.3f | %.3f | %.4f | %s |\n",
              num_workers, link.c_str(), name.c_str(), Median(ms),
              absl::StrJoin(each, ", ").c_str(), Median(bytes) / 1e6,
              2.0 * (num_workers - 1) / num_workers * model / 1e6,
              Median(accuracy), absl::StrJoin(row.loads, ", ").c_str());
  std::fflush(stdout);
}

// The flags besides the host grid; false, the reason printed, if one is off.
bool CheckFlags(std::vector<std::string>& compressions,
                std::vector<std::string>& transports) {
  for (const absl::Status& status :
       {CheckFlagRange("repeats", absl::GetFlag(FLAGS_repeats), 1, 1000),
        CheckFlagRange("steps", absl::GetFlag(FLAGS_steps), 1, 1000000),
        CheckFlagRange("warmup", absl::GetFlag(FLAGS_warmup), 0, 1000000),
        CheckFlagRange("batch_size", absl::GetFlag(FLAGS_batch_size), 1, 60000),
        CheckFlagRange("eval_examples", absl::GetFlag(FLAGS_eval_examples), 0,
                       10000)}) {
    if (!status.ok()) {
      absl::FPrintF(stderr, "%s\n", status.message());
      return false;
    }
  }
  absl::StatusOr<std::vector<std::string>> c =
      bench::ParseChoiceList("compression", absl::GetFlag(FLAGS_compression),
                             {"none", "fp16", "bf16"});
  absl::StatusOr<std::vector<std::string>> t = bench::ParseChoiceList(
      "transports", absl::GetFlag(FLAGS_transports), {"grpc", "frames"});
  for (const absl::Status& status : {c.status(), t.status()}) {
    if (!status.ok()) {
      absl::FPrintF(stderr, "%s\n", status.message());
      return false;
    }
  }
  compressions = *std::move(c);
  transports = *std::move(t);
  return true;
}

int Main() {
  const absl::StatusOr<bench::HostGrid> grid = bench::ParseHostGrid(
      absl::GetFlag(FLAGS_workers), absl::GetFlag(FLAGS_rates_mbit));
  if (!grid.ok()) {
    absl::FPrintF(stderr, "%s\n", grid.status().message());
    return 2;
  }
  std::vector<std::string> compressions, transports;
  if (!CheckFlags(compressions, transports)) return 2;
  if (const std::string why = TestHosts::WhyUnavailable(); !why.empty()) {
    std::fprintf(stderr, "no test hosts here: %s\n", why.c_str());
    return 1;
  }
  std::printf(
      "| workers | link | layout | ms/step (median; runs) | MB per worker "
      "per step | 2(N-1)/N x model, MB | test accuracy | load average |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const bool alternate = absl::GetFlag(FLAGS_alternate);
  for (const int num_workers : grid->workers) {
    for (const int64_t mbit : grid->rates_mbit) {
      const std::string link = bench::LinkRateName(mbit);
      std::vector<Row> rows;
      for (const std::string& transport : transports) {
        for (const std::string& compression : compressions) {
          for (ServiceLayout services :
               {ServiceLayout::kServersApart, ServiceLayout::kServersBeside}) {
            rows.push_back(Row{
                Layout{false, services, compression, transport == "frames"}});
          }
        }
      }
      if (absl::GetFlag(FLAGS_ring)) {
        rows.push_back(Row{Layout{false, ServiceLayout::kRing}});
      }
      rows.push_back(Row{Layout{true}});
      auto run_once = [&](Row& row) {
        row.loads.push_back(LoadAverage());
        std::optional<Result> result =
            RunJob(row.layout, num_workers, mbit * 1000 * 1000);
        if (result.has_value()) row.results.push_back(*std::move(result));
      };
      if (alternate) {
        for (int run = 0; run < repeats; ++run) {
          for (Row& row : rows) run_once(row);
        }
        for (const Row& row : rows) PrintRow(row, num_workers, link);
      } else {
        for (Row& row : rows) {
          for (int run = 0; run < repeats; ++run) run_once(row);
          PrintRow(row, num_workers, link);
        }
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
