#ifndef PS_BENCH_MEASURE_H_
#define PS_BENCH_MEASURE_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace ps::bench {

// How long a throughput measurement runs: `warmup_rounds` untimed rounds,
// then `trials` timed trials, each of rounds until both `min_rounds` and
// `min_time` are reached (or `max_rounds`, whichever comes first); the
// median trial is reported, since a shared 2-core VM has outliers both
// ways. trials = 1, min_rounds = 1 and min_time = 0 give a single timed
// round, for smoke tests.
struct MeasureOptions {
  int warmup_rounds = 2;
  int trials = 3;
  int min_rounds = 2;
  int max_rounds = 1000000;
  absl::Duration min_time = absl::Milliseconds(400);
};

// Checks the ranges above; InvalidArgument names the bad field.
absl::Status ValidateMeasureOptions(const MeasureOptions& options);

// The outcome of one measurement: its median trial.
struct Measurement {
  int rounds = 0;
  absl::Duration elapsed;
  uint64_t bytes = 0;  // Moved in the trial's rounds.
  // CPU time (user + system) the trial took on the CPU clock measured.
  absl::Duration cpu;

  // Decimal gigabytes (1e9 bytes) per second.
  double gbps() const;
  // CPU nanoseconds per byte moved: unlike GB/s, this barely moves when
  // other processes compete for the 2 cores, so it is the figure to compare
  // when profiling on a shared machine.
  double cpu_ns_per_byte() const;
};

// A clock of CPU time consumed so far, by whatever it covers.
using CpuClock = absl::FunctionRef<absl::Duration()>;

// CPU time of this process (all its threads), user plus system.
absl::Duration ProcessCpuTime();

// CPU time of process `pid` (all its threads), user plus system, from
// /proc/<pid>/stat (clock-tick resolution); NotFound once it is gone.
absl::StatusOr<absl::Duration> OtherProcessCpuTime(int pid);

// Gigabytes (1e9) per second for `bytes` in `elapsed`; 0 if nothing elapsed.
double Gbps(uint64_t bytes, absl::Duration elapsed);

// Runs `round` as `options` say and times it; each round moves
// `bytes_per_round`. Stops at the first failed round and returns its error.
// Every round after the warm-up ones belongs to some trial.
absl::StatusOr<Measurement> MeasureRounds(
    const MeasureOptions& options, uint64_t bytes_per_round,
    absl::FunctionRef<absl::Status()> round);
// The same, with CPU time read from `cpu_clock` (e.g. this process plus the
// servers it talks to) instead of this process alone.
absl::StatusOr<Measurement> MeasureRounds(
    const MeasureOptions& options, uint64_t bytes_per_round,
    absl::FunctionRef<absl::Status()> round, CpuClock cpu_clock);

// Copies `size` bytes between two buffers of this process: the memory
// bandwidth any transfer of ours is bounded by.
absl::StatusOr<Measurement> MeasureMemcpy(const MeasureOptions& options,
                                          uint64_t size);

// Where the TCP baselines' receiving end listens: by default 127.0.0.1 in
// the caller's network namespace; across test hosts another host's address,
// its listening socket made in that host's network namespace (the rest of
// the baseline stays in the caller's, so the bytes cross the link).
struct TcpPeer {
  std::string address = "127.0.0.1";
  // An open /run/netns/NAME (not owned; must outlive the call), or -1.
  int netns_fd = -1;
};

// Streams `size` bytes a round through one TCP connection over 127.0.0.1:
// this thread writes, another (on `reader_cpus`, empty: any) reads into a
// buffer of `size` bytes; a round ends when the reader has everything. The
// kernel's loopback limit, without gRPC or protobuf.
absl::StatusOr<Measurement> MeasureTcpStream(
    const MeasureOptions& options, uint64_t size,
    absl::Span<const int> reader_cpus = {}, const TcpPeer& peer = {});

// One request of `size` bytes and its response of `size` bytes a round,
// over one TCP connection on 127.0.0.1 (TCP_NODELAY) to a peer thread (on
// `peer_cpus`, empty: any) that echoes them: the kernel's latency for the
// exchange a small push+pull makes, without gRPC. 2 x size a round.
absl::StatusOr<Measurement> MeasureTcpRequestResponse(
    const MeasureOptions& options, uint64_t size,
    absl::Span<const int> peer_cpus = {}, const TcpPeer& peer = {});

}  // namespace ps::bench

#endif  // PS_BENCH_MEASURE_H_
