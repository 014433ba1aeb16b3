#ifndef PS_BENCH_BENCH_RUNNER_H_
#define PS_BENCH_BENCH_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "bench/measure.h"
#include "bench/push_pull.h"

namespace ps::bench {

// What the push+pull benchmark runs: every size against every server count,
// plus the baselines: memcpy and the gRPC echo once per size, the TCP stream
// right after each measurement of ours.
struct BenchConfig {
  std::vector<uint64_t> sizes;
  std::vector<int> server_counts;
  // Each row of ours is measured over each of these: true is the same-host
  // transport, false gRPC (PushPullOptions::local_transport).
  std::vector<bool> transports = {true};
  MeasureOptions measure;
  // Server binary, chunk, optimizer and work directory; size and server
  // count are filled in per row.
  PushPullOptions push_pull;
  // Chunk of the gRPC echo baseline.
  uint64_t echo_chunk_bytes = 1 << 20;
  // False skips the baselines (their columns read 0), e.g. for profiling.
  bool baselines = true;
  // The CPUs of this process, the worker (empty: any). The shards', also
  // those of the baselines' receiving ends, are push_pull.server_cpus.
  std::vector<int> worker_cpus;
};

// One line of the table. Every rate is in GB/s (1e9 bytes a second): ours
// and echo count push plus pull (2 * size a round), TCP and memcpy count the
// size once (one stream, one copy).
struct BenchRow {
  uint64_t size_bytes = 0;
  int servers = 0;
  // "local" (the same-host transport) or "grpc".
  std::string transport;
  // One PushPull call per shard a round, as training does.
  double ours_gbps = 0;
  // The same as a Push then a Pull call, and their directions alone.
  double two_calls_gbps = 0;
  double push_gbps = 0;
  double pull_gbps = 0;
  double tcp_gbps = 0;
  // A request and a response of the size over TCP (2 x size a round, as
  // ours): the latency a small round is compared with.
  double tcp_rr_gbps = 0;
  double memcpy_gbps = 0;
  double echo_gbps = 0;
  // CPU nanoseconds per byte moved (all threads of the worker and the
  // shards; of this process for the baselines).
  double ours_cpu_ns_per_byte = 0;
  double tcp_cpu_ns_per_byte = 0;
  double echo_cpu_ns_per_byte = 0;
  // The shards' final reports (see PushPullResult).
  std::vector<server::ShardReport> shard_reports;
};

// Parses a comma-separated list of server counts, each in [1, 16].
absl::StatusOr<std::vector<int>> ParseServerCounts(absl::string_view text);

// Parses a comma-separated list of "local" and "grpc" (BenchConfig's
// transports), each at most once.
absl::StatusOr<std::vector<bool>> ParseTransports(absl::string_view text);

// The benchmark's default placement, as on separate machines: the worker
// on the first half of `cpus` (those this process may use), the shards and
// the baselines' receiving ends on the rest. With fewer than 2 CPUs both
// are empty (any).
struct CpuSplit {
  std::vector<int> worker;
  std::vector<int> servers;
};
CpuSplit SplitCpus(absl::Span<const int> cpus);

// "4 KiB", "64 MiB", or plain bytes ("1000 B") when not a whole unit.
std::string FormatSize(uint64_t bytes);

std::string TableHeader();
std::string TableRow(const BenchRow& row);

// The server binary next to `argv0` in Bazel's runfiles (bazel run, bazel
// test, or bazel-bin/bench/push_pull_bench run by hand); empty if none.
std::string FindServerBinary(absl::string_view argv0);

// Measures every row of `config` and hands each to `on_row` as it is done.
// Stops at the first error.
absl::Status RunBench(const BenchConfig& config,
                      absl::FunctionRef<void(const BenchRow&)> on_row);

}  // namespace ps::bench

#endif  // PS_BENCH_BENCH_RUNNER_H_
