#include "bench/bench_runner.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/bench_flags.h"
#include "bench/grpc_echo.h"

namespace ps::bench {
namespace {

constexpr int kMaxServers = 16;
constexpr char kWorkspace[] = "paramserver";

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

absl::StatusOr<std::vector<int>> ParseServerCounts(absl::string_view text) {
  absl::StatusOr<std::vector<int64_t>> counts =
      ParseNumberList(text, "server count", 1, kMaxServers);
  if (!counts.ok()) return counts.status();
  return std::vector<int>(counts->begin(), counts->end());
}

absl::StatusOr<std::vector<bool>> ParseTransports(absl::string_view text) {
  std::vector<bool> transports;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part != "local" && part != "grpc") {
      return absl::InvalidArgumentError(
          absl::StrCat("transport \"", part, "\" is neither local nor grpc"));
    }
    const bool local = part == "local";
    if (std::find(transports.begin(), transports.end(), local) !=
        transports.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("transport ", part, " is given twice"));
    }
    transports.push_back(local);
  }
  return transports;
}

std::string FormatSize(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30) && bytes % (uint64_t{1} << 30) == 0) {
    return absl::StrCat(bytes >> 30, " GiB");
  }
  if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0) {
    return absl::StrCat(bytes >> 20, " MiB");
  }
  if (bytes >= (uint64_t{1} << 10) && bytes % (uint64_t{1} << 10) == 0) {
    return absl::StrCat(bytes >> 10, " KiB");
  }
  return absl::StrCat(bytes, " B");
}

// Microseconds a round of 2 x `size` bytes takes at `gbps`.
double RoundMicros(uint64_t size, double gbps) {
  return gbps > 0 ? 2.0 * static_cast<double>(size) / (gbps * 1e3) : 0.0;
}

std::string TableHeader() {
  return absl::StrFormat(
      "%-8s %7s %5s | %8s | %8s %6s | %8s %8s %6s | %8s %6s | %8s %6s | %8s "
      "%8s %8s | %6s %6s %6s",
      "size", "servers", "via", "ours", "TCP", "o/TCP", "us:ours", "us:TCPrr",
      "o/rr", "memcpy", "o/mem", "echo", "o/echo", "2 calls", "push", "pull",
      "cpu:o", "echo", "TCP");
}

std::string TableRow(const BenchRow& row) {
  return absl::StrFormat(
      "%-8s %7d %5s | %8.4f | %8.4f %6.2f | %8.1f %8.1f %6.2f | %8.4f %6.2f | "
      "%8.4f %6.2f | %8.4f %8.4f %8.4f | %6.2f %6.2f %6.2f",
      FormatSize(row.size_bytes), row.servers, row.transport, row.ours_gbps,
      row.tcp_gbps, Ratio(row.ours_gbps, row.tcp_gbps),
      RoundMicros(row.size_bytes, row.ours_gbps),
      RoundMicros(row.size_bytes, row.tcp_rr_gbps),
      Ratio(row.tcp_rr_gbps, row.ours_gbps), row.memcpy_gbps,
      Ratio(row.ours_gbps, row.memcpy_gbps), row.echo_gbps,
      Ratio(row.ours_gbps, row.echo_gbps), row.two_calls_gbps, row.push_gbps,
      row.pull_gbps, row.ours_cpu_ns_per_byte, row.echo_cpu_ns_per_byte,
      row.tcp_cpu_ns_per_byte);
}

CpuSplit SplitCpus(absl::Span<const int> cpus) {
  if (cpus.size() < 2) return {};
  const size_t half = cpus.size() / 2;
  return {std::vector<int>(cpus.begin(), cpus.begin() + half),
          std::vector<int>(cpus.begin() + half, cpus.end())};
}

std::string FindServerBinary(absl::string_view argv0) {
  const std::string relative = absl::StrCat(kWorkspace, "/server/server");
  std::vector<std::string> candidates;
  if (const char* dir = std::getenv("RUNFILES_DIR"); dir != nullptr) {
    candidates.push_back(absl::StrCat(dir, "/", relative));
  }
  if (const char* dir = std::getenv("TEST_SRCDIR"); dir != nullptr) {
    candidates.push_back(absl::StrCat(dir, "/", relative));
  }
  candidates.push_back(absl::StrCat(argv0, ".runfiles/", relative));
  // bazel-bin/bench/push_pull_bench next to bazel-bin/server/server.
  const size_t slash = argv0.rfind('/');
  const std::string dir = slash == absl::string_view::npos
                              ? "."
                              : std::string(argv0.substr(0, slash));
  candidates.push_back(absl::StrCat(dir, "/../server/server"));
  for (const std::string& c : candidates) {
    if (IsExecutableFile(c)) return c;
  }
  return "";
}

absl::Status RunBench(const BenchConfig& config,
                      absl::FunctionRef<void(const BenchRow&)> on_row) {
  if (config.sizes.empty() || config.server_counts.empty()) {
    return absl::InvalidArgumentError("no sizes or no server counts to run");
  }
  for (uint64_t size : config.sizes) {
    BenchRow base;
    base.size_bytes = size;
    if (config.baselines) {
      absl::StatusOr<Measurement> memcpy = MeasureMemcpy(config.measure, size);
      if (!memcpy.ok()) return memcpy.status();
      base.memcpy_gbps = memcpy->gbps();
      absl::StatusOr<Measurement> echo =
          MeasureGrpcEcho(config.measure, size, config.echo_chunk_bytes,
                          config.push_pull.server_cpus);
      if (!echo.ok()) return echo.status();
      base.echo_gbps = echo->gbps();
      base.echo_cpu_ns_per_byte = echo->cpu_ns_per_byte();
    }
    for (int servers : config.server_counts) {
      for (bool local : config.transports) {
        PushPullOptions options = config.push_pull;
        options.size_bytes = size;
        options.num_servers = servers;
        options.local_transport = local;
        absl::StatusOr<PushPullResult> ours =
            MeasurePushPull(config.measure, options);
        if (!ours.ok()) {
          return absl::Status(
              ours.status().code(),
              absl::StrCat("push+pull of ", FormatSize(size), " with ", servers,
                           " servers: ", ours.status().message()));
        }
        BenchRow row = base;
        row.servers = servers;
        row.transport = local ? "local" : "grpc";
        if (config.baselines) {
          // The target is a ratio to TCP: measured right after ours, so that
          // both see the same load on a shared machine.
          absl::StatusOr<Measurement> tcp = MeasureTcpStream(
              config.measure, size, config.push_pull.server_cpus);
          if (!tcp.ok()) return tcp.status();
          row.tcp_gbps = tcp->gbps();
          row.tcp_cpu_ns_per_byte = tcp->cpu_ns_per_byte();
          absl::StatusOr<Measurement> rr = MeasureTcpRequestResponse(
              config.measure, size, config.push_pull.server_cpus);
          if (!rr.ok()) return rr.status();
          row.tcp_rr_gbps = rr->gbps();
        }
        row.ours_gbps = ours->round_trip.gbps();
        row.two_calls_gbps = ours->two_calls.gbps();
        row.ours_cpu_ns_per_byte = ours->round_trip.cpu_ns_per_byte();
        row.push_gbps = ours->push_gbps;
        row.pull_gbps = ours->pull_gbps;
        row.shard_reports = std::move(ours->shard_reports);
        on_row(row);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ps::bench
