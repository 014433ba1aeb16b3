#ifndef PS_SERVER_SERVER_METRICS_H_
#define PS_SERVER_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/server_stats.h"

namespace ps::server {

// The Prometheus metrics of one shard, every series labelled
// shard="<index>":
//   ps_server_push_total, ps_server_pull_total        accepted / served calls
//   ps_server_push_bytes_total, ps_server_pull_bytes_total
//   ps_server_push_duration_seconds, ps_server_pull_duration_seconds
//                                   histograms of accepted / served calls
//   ps_server_pull_wait_seconds     histogram: the part of a served pull
//                                   spent waiting for the consistency model
//   ps_server_wait_for_rank_seconds_total{rank}
//                                   a pull, or a sync push awaiting its
//                                   step, waiting while `rank` held it up
//   ps_server_refused_total{call, reason}
//                                   refused pushes and pulls, by status code
//   ps_server_worker_restarts_total{rank}
//                                   a rank registering with a new process
//   ps_server_checkpoint_timestamp_seconds, ps_server_checkpoint_version
//   ps_server_start_time_seconds, ps_server_restored (1: from a checkpoint)
// and, read from the shard at each scrape (ShardStateCollector):
//   ps_server_version, ps_server_staleness_updates (histogram),
//   ps_server_checkpoint_age_seconds,
//   ps_server_rank_next_step{rank}   steps the rank has done here: a slow
//                                    rank is the one behind
//   ps_server_rank_dead{rank}        1 while the rank is declared dead
//   ps_server_updates_replayed       updates replayed from the update log
//                                    after this process's restore (only
//                                    after one)
//   ps_server_updates_lost           updates lost in restarts (only when
//                                    known: not after a restore without a
//                                    log)
//   ps_server_workers_unheard        ranks silent past --worker_timeout but
//                                    not declared dead, for this shard has
//                                    not heard the network (it may be the
//                                    one cut off; Membership::unheard)
// and, while the same-host transport serves (SetLocalTransportCounts):
//   ps_server_local_calls_total      calls served over the same-host
//                                    transport (the rest came over gRPC)
//   ps_server_local_connections_total  its connections admitted
//   ps_server_tcp_frame_calls_total  calls served as the same frames over
//                                    TCP, from workers on other hosts
//   ps_server_tcp_frame_connections_total  its connections admitted
//
// Thread-safe: series are resolved once, so a Record is a few atomic
// increments and, for histograms, prometheus-cpp's brief lock. Shares the
// registry.
class ServerMetrics {
 public:
  ServerMetrics(std::shared_ptr<prometheus::Registry> registry, int shard);

  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // As ServerStats::RecordPush/RecordPull; a refused call counts only in
  // ps_server_refused_total.
  void RecordPush(const absl::Status& outcome, uint64_t bytes,
                  absl::Duration latency);
  void RecordPull(const absl::Status& outcome, uint64_t bytes,
                  absl::Duration wait, absl::Duration latency);
  // A pull waited `wait` while `blocking` (the ranks it waited for when it
  // began) had not done what it needed.
  void RecordWaitFor(absl::Span<const int> blocking, absl::Duration wait);
  // `rank` registered as `incarnation`; a change from the one it had here
  // is a restart of that worker.
  void RecordRegistration(int rank, uint64_t incarnation);
  // A checkpoint of `version` was written at `when`.
  void RecordCheckpoint(uint64_t version, absl::Time when);
  // This shard started from a checkpoint.
  void RecordRestored();

  // When the last checkpoint was written; nullopt before the first.
  std::optional<absl::Time> last_checkpoint() const;

  // What the same-host transport has served; read at each scrape.
  struct LocalTransportCounts {
    // Over the Unix socket.
    int64_t calls = 0;
    int64_t connections = 0;
    // Over TCP.
    int64_t tcp_calls = 0;
    int64_t tcp_connections = 0;
  };
  // `read` (null: no same-host transport) is called at each scrape until it
  // is replaced; what it reads must outlive that.
  void SetLocalTransportCounts(std::function<LocalTransportCounts()> read);
  std::optional<LocalTransportCounts> local_transport_counts() const;

  // What a scrape reads from the shard; nullopt until the model is declared.
  struct ShardState {
    uint64_t version = 0;
    StalenessHistogram::State staleness;
    // By rank.
    std::vector<uint64_t> next_steps;
    std::vector<bool> dead;
    int unheard = 0;
    // As ShardReport's (server/shard_report.h): unset, not exported.
    std::optional<uint64_t> updates_replayed;
    std::optional<uint64_t> updates_lost = 0;
  };
  // Collects ps_server_version, ps_server_staleness_updates and
  // ps_server_checkpoint_age_seconds from `read` (called at each scrape, on
  // the HTTP server's thread) and from `metrics`, which must outlive it.
  static std::shared_ptr<prometheus::Collectable> ShardStateCollector(
      const ServerMetrics* metrics,
      std::function<std::optional<ShardState>()> read);

  int shard() const { return shard_; }

 private:
  // Indexed by absl::StatusCode (0..16).
  using ByCode = std::array<prometheus::Counter*, 17>;
  ByCode RefusedFamily(const char* call);
  static prometheus::Counter& RefusedSeries(const ByCode& series,
                                            absl::StatusCode code);

  const std::shared_ptr<prometheus::Registry> registry_;
  const int shard_;
  prometheus::Counter& pushes_;
  prometheus::Counter& pulls_;
  prometheus::Counter& push_bytes_;
  prometheus::Counter& pull_bytes_;
  prometheus::Histogram& push_seconds_;
  prometheus::Histogram& pull_seconds_;
  prometheus::Histogram& pull_wait_seconds_;
  prometheus::Family<prometheus::Counter>& refused_family_;
  const ByCode push_refused_;
  const ByCode pull_refused_;
  prometheus::Family<prometheus::Counter>& wait_for_rank_;
  prometheus::Family<prometheus::Counter>& worker_restarts_;
  prometheus::Gauge& checkpoint_timestamp_;
  prometheus::Gauge& checkpoint_version_;
  prometheus::Gauge& restored_;

  mutable absl::Mutex mu_;
  // Series of ranks seen so far, made on first use (rare: a pull that
  // waited, a registration); then found without allocating.
  absl::flat_hash_map<int, prometheus::Counter*> wait_for_rank_series_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, uint64_t> incarnations_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> last_checkpoint_ ABSL_GUARDED_BY(mu_);
  std::function<LocalTransportCounts()> read_local_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_SERVER_METRICS_H_
