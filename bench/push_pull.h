#ifndef PS_BENCH_PUSH_PULL_H_
#define PS_BENCH_PUSH_PULL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/measure.h"
#include "client/parameter_client.h"
#include "common/subprocess.h"
#include "server/shard_report.h"

namespace ps::bench {

// One push+pull measurement against real shard processes.
struct PushPullOptions {
  // Path of the `server` binary (//server:server).
  std::string server_binary;
  int num_servers = 1;
  // Bytes of float32 in the model; a multiple of 4, see MlpLayersForBytes.
  uint64_t size_bytes = 0;
  // Bytes per streamed chunk, both directions (ClientOptions.chunk_elements
  // times 4); a multiple of 4.
  uint64_t chunk_bytes = 1 << 20;
  // The shards' --optimizer; "sgd" runs with momentum 0, the cheapest update.
  std::string optimizer = "sgd";
  // Whether the client reaches the shards over the same-host transport
  // (their --local_transport and ClientOptions.local_transport) or gRPC.
  bool local_transport = true;
  // How the client sends gradients and takes weights (every tensor).
  Compression compression;
  // The shards' --cpus (empty: any CPU).
  std::vector<int> server_cpus;
  // Across test hosts: shard i listens on shard_hosts[i] (an address of
  // this machine's network namespaces) and is started by start_shard(i,
  // ...), e.g. TestHosts::Start on its host. Empty / unset: 127.0.0.1 and
  // Subprocess::Start.
  std::vector<std::string> shard_hosts;
  std::function<absl::StatusOr<std::unique_ptr<Subprocess>>(
      int shard, SubprocessOptions options)>
      start_shard;
  // Where the shards' port files go; must exist.
  std::string work_dir;
  // "on": the shards write checkpoints (--checkpoint_dir, a fresh one under
  // work_dir for each start) with their update log, as a launched job's
  // do; "off": checkpoints without the log (--update_log=false); "none"
  // (empty too): no checkpoint directory, as before.
  std::string update_log;
  // Whether to time the Push-then-Pull rounds too (PushPullResult's
  // two_calls, push_gbps and pull_gbps stay 0 without); false leaves the
  // fused rounds alone, e.g. to count what one costs under a profiler.
  bool measure_two_calls = true;
  absl::Duration start_timeout = absl::Seconds(60);
};

struct PushPullResult {
  // A training step's exchange, as the trainer makes it: one PushPull call
  // per shard (StartStep with pull_after), 2 * size_bytes a round.
  Measurement round_trip;
  // The same bytes as two calls per shard, Push then Pull.
  Measurement two_calls;
  // Each direction of `two_calls` timed on its own (size_bytes a round),
  // over all its timed rounds of all trials.
  double push_gbps = 0;
  double pull_gbps = 0;
  // Each shard's report (--report_file, read after it exited): its own push
  // and pull latencies, over warm-up and timed rounds alike, for profiling.
  std::vector<server::ShardReport> shard_reports;
};

// Layer sizes {a, b} of the MLP whose weight [a, b] and bias [b] hold
// exactly size_bytes / 4 floats: (a + 1) * b = size_bytes / 4, b as close to
// the square root as divisibility allows. The model the measurements
// declare; the same layout as when the servers took it from --model, so
// that figures stay comparable. InvalidArgument if size_bytes is not
// a positive multiple of 4 with at least 2 floats, or no such layers exist
// within the 1 << 20 layer-size limit.
absl::StatusOr<std::vector<int>> MlpLayersForBytes(uint64_t size_bytes);

// Starts `num_servers` shard processes of the server binary on 127.0.0.1
// (port 0, read back from port files) in async mode with one worker, then
// connects a ps::ParameterClient, declares that MLP and times rounds of Push
// (all gradients) then Pull (all weights), then rounds of StartStep with
// pull_after (the same in one call per shard). Every shard must exit
// cleanly after the client's Finish; otherwise the error carries its last
// log lines.
absl::StatusOr<PushPullResult> MeasurePushPull(const MeasureOptions& measure,
                                               const PushPullOptions& options);

}  // namespace ps::bench

#endif  // PS_BENCH_PUSH_PULL_H_
