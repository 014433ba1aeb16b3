#include "server/server_metrics.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics_http.h"

namespace ps::server {
namespace {

// 100 us to 30 s: a push or pull of a small model on loopback up to a sync
// step waiting for a slow worker.
prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};
}

prometheus::Labels ShardLabel(int shard) {
  return {{"shard", std::to_string(shard)}};
}

prometheus::Histogram& SecondsHistogram(prometheus::Registry& registry,
                                        const char* name, const char* help,
                                        int shard) {
  return prometheus::BuildHistogram()
      .Name(name)
      .Help(help)
      .Register(registry)
      .Add(ShardLabel(shard), SecondsBuckets());
}

prometheus::Counter& ShardCounter(prometheus::Registry& registry,
                                  const char* name, const char* help,
                                  int shard) {
  return AddCounter(registry, name, help, ShardLabel(shard));
}

prometheus::Gauge& ShardGauge(prometheus::Registry& registry, const char* name,
                              const char* help, int shard) {
  return AddGauge(registry, name, help, ShardLabel(shard));
}

double UnixSeconds(absl::Time t) {
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

// One sample labelled shard="<shard>".
prometheus::MetricFamily ShardFamily(const char* name, const char* help,
                                     int shard, prometheus::MetricType type,
                                     double value) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric& metric = family.metric.emplace_back();
  metric.label.push_back({"shard", std::to_string(shard)});
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return family;
}

prometheus::MetricFamily GaugeFamily(const char* name, const char* help,
                                     int shard, double value) {
  return ShardFamily(name, help, shard, prometheus::MetricType::Gauge, value);
}

prometheus::MetricFamily CounterFamily(const char* name, const char* help,
                                       int shard, double value) {
  return ShardFamily(name, help, shard, prometheus::MetricType::Counter, value);
}

// One gauge of `name` per rank, labelled with it.
prometheus::MetricFamily RankGaugeFamily(const char* name, const char* help,
                                         int shard,
                                         const std::vector<double>& values) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = prometheus::MetricType::Gauge;
  for (size_t rank = 0; rank < values.size(); ++rank) {
    prometheus::ClientMetric& metric = family.metric.emplace_back();
    metric.label.push_back({"rank", std::to_string(rank)});
    metric.label.push_back({"shard", std::to_string(shard)});
    metric.gauge.value = values[rank];
  }
  return family;
}

// StalenessHistogram counts 0..31 exactly and larger values in
// power-of-two ranges; these bounds are sums of whole buckets.
prometheus::MetricFamily StalenessFamily(int shard,
                                         const StalenessHistogram::State& s) {
  prometheus::MetricFamily family;
  family.name = "ps_server_staleness_updates";
  family.help =
      "Staleness of applied gradients: the shard's version when applied "
      "minus the version they were computed from.";
  family.type = prometheus::MetricType::Histogram;
  prometheus::ClientMetric& metric = family.metric.emplace_back();
  metric.label.push_back({"shard", std::to_string(shard)});
  metric.histogram.sample_count = s.count;
  metric.histogram.sample_sum = s.sum;
  std::vector<uint64_t> bounds = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 31};
  for (int log2 = 6; log2 <= 20; ++log2) bounds.push_back((1u << log2) - 1);
  uint64_t cumulative = 0;
  int next_bucket = 0;
  for (uint64_t bound : bounds) {
    for (; next_bucket <= StalenessHistogram::BucketOf(bound); ++next_bucket) {
      cumulative += s.buckets[next_bucket];
    }
    metric.histogram.bucket.push_back({cumulative, static_cast<double>(bound)});
  }
  metric.histogram.bucket.push_back(
      {s.count, std::numeric_limits<double>::infinity()});
  return family;
}

class ShardCollector : public prometheus::Collectable {
 public:
  ShardCollector(const ServerMetrics* metrics,
                 std::function<std::optional<ServerMetrics::ShardState>()> read)
      : metrics_(metrics), read_(std::move(read)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families;
    const int shard = metrics_->shard();
    if (std::optional<absl::Time> written = metrics_->last_checkpoint()) {
      families.push_back(
          GaugeFamily("ps_server_checkpoint_age_seconds",
                      "Seconds since this shard last wrote a checkpoint.",
                      shard, absl::ToDoubleSeconds(absl::Now() - *written)));
    }
    if (std::optional<ServerMetrics::ShardState> state = read_()) {
      families.push_back(GaugeFamily("ps_server_version",
                                     "Updates applied to this shard.", shard,
                                     static_cast<double>(state->version)));
      families.push_back(StalenessFamily(shard, state->staleness));
      families.push_back(RankGaugeFamily(
          "ps_server_rank_next_step",
          "Steps the rank has done here (its next step): a slow rank is "
          "behind the others.",
          shard,
          std::vector<double>(state->next_steps.begin(),
                              state->next_steps.end())));
      families.push_back(RankGaugeFamily(
          "ps_server_rank_dead", "1 while the rank is declared dead.", shard,
          std::vector<double>(state->dead.begin(), state->dead.end())));
      families.push_back(GaugeFamily(
          "ps_server_workers_unheard",
          "Workers silent past --worker_timeout but not declared dead: this "
          "shard has not heard the network long enough to tell (it may be "
          "the one cut off).",
          shard, state->unheard));
      if (state->updates_replayed.has_value()) {
        families.push_back(GaugeFamily(
            "ps_server_updates_replayed",
            "Updates replayed from the update log after this process's "
            "restore.",
            shard, static_cast<double>(*state->updates_replayed)));
      }
      if (state->updates_lost.has_value()) {
        families.push_back(GaugeFamily(
            "ps_server_updates_lost",
            "Updates this shard applied before a restart and no longer "
            "holds (absent when not known: restored without an update log).",
            shard, static_cast<double>(*state->updates_lost)));
      }
    }
    if (std::optional<ServerMetrics::LocalTransportCounts> local =
            metrics_->local_transport_counts()) {
      families.push_back(CounterFamily(
          "ps_server_local_calls_total",
          "Calls served over the same-host transport; the others came over "
          "gRPC.",
          shard, static_cast<double>(local->calls)));
      families.push_back(
          CounterFamily("ps_server_local_connections_total",
                        "Connections the same-host transport admitted.", shard,
                        static_cast<double>(local->connections)));
      families.push_back(CounterFamily(
          "ps_server_tcp_frame_calls_total",
          "Calls served as the same-host transport's frames over TCP, from "
          "workers on other hosts.",
          shard, static_cast<double>(local->tcp_calls)));
      families.push_back(
          CounterFamily("ps_server_tcp_frame_connections_total",
                        "Connections admitted to the frames over TCP.", shard,
                        static_cast<double>(local->tcp_connections)));
    }
    return families;
  }

 private:
  const ServerMetrics* const metrics_;
  const std::function<std::optional<ServerMetrics::ShardState>()> read_;
};

}  // namespace

ServerMetrics::ByCode ServerMetrics::RefusedFamily(const char* call) {
  ByCode series = {};
  for (int code = 1; code < static_cast<int>(series.size()); ++code) {
    series[code] = &refused_family_.Add(
        {{"shard", std::to_string(shard_)},
         {"call", call},
         {"reason", absl::AsciiStrToLower(absl::StatusCodeToString(
                        static_cast<absl::StatusCode>(code)))}});
  }
  return series;
}

prometheus::Counter& ServerMetrics::RefusedSeries(const ByCode& series,
                                                  absl::StatusCode code) {
  const int i = static_cast<int>(code);
  return *series[i > 0 && i < static_cast<int>(series.size())
                     ? i
                     : static_cast<int>(absl::StatusCode::kUnknown)];
}

ServerMetrics::ServerMetrics(std::shared_ptr<prometheus::Registry> registry,
                             int shard)
    : registry_(std::move(registry)),
      shard_(shard),
      pushes_(ShardCounter(*registry_, "ps_server_push_total",
                           "Pushes accepted.", shard)),
      pulls_(ShardCounter(*registry_, "ps_server_pull_total", "Pulls served.",
                          shard)),
      push_bytes_(ShardCounter(*registry_, "ps_server_push_bytes_total",
                               "Gradient bytes received.", shard)),
      pull_bytes_(ShardCounter(*registry_, "ps_server_pull_bytes_total",
                               "Weight bytes sent.", shard)),
      push_seconds_(SecondsHistogram(
          *registry_, "ps_server_push_duration_seconds",
          "Accepted pushes: from the call's start to its commit.", shard)),
      pull_seconds_(SecondsHistogram(
          *registry_, "ps_server_pull_duration_seconds",
          "Served pulls: from the call's start to the last weight sent.",
          shard)),
      pull_wait_seconds_(SecondsHistogram(
          *registry_, "ps_server_pull_wait_seconds",
          "The part of a served pull spent waiting for the consistency model "
          "(other workers' pushes).",
          shard)),
      refused_family_(prometheus::BuildCounter()
                          .Name("ps_server_refused_total")
                          .Help("Pushes and pulls refused, by status code.")
                          .Register(*registry_)),
      push_refused_(RefusedFamily("push")),
      pull_refused_(RefusedFamily("pull")),
      wait_for_rank_(
          prometheus::BuildCounter()
              .Name("ps_server_wait_for_rank_seconds_total")
              .Help("Seconds pulls, and sync pushes awaiting their step, "
                    "waited while this rank was one they waited for.")
              .Register(*registry_)),
      worker_restarts_(prometheus::BuildCounter()
                           .Name("ps_server_worker_restarts_total")
                           .Help("A rank registering here with a new process.")
                           .Register(*registry_)),
      checkpoint_timestamp_(ShardGauge(
          *registry_, "ps_server_checkpoint_timestamp_seconds",
          "When this shard last wrote a checkpoint (Unix time).", shard)),
      checkpoint_version_(ShardGauge(*registry_, "ps_server_checkpoint_version",
                                     "The version last checkpointed.", shard)),
      restored_(ShardGauge(*registry_, "ps_server_restored",
                           "1 if this shard started from a checkpoint.",
                           shard)) {
  ShardGauge(*registry_, "ps_server_start_time_seconds",
             "When this server process started (Unix time).", shard)
      .Set(UnixSeconds(absl::Now()));
}

void ServerMetrics::RecordPush(const absl::Status& outcome, uint64_t bytes,
                               absl::Duration latency) {
  if (!outcome.ok()) {
    RefusedSeries(push_refused_, outcome.code()).Increment();
    return;
  }
  pushes_.Increment();
  push_bytes_.Increment(static_cast<double>(bytes));
  push_seconds_.Observe(absl::ToDoubleSeconds(latency));
}

void ServerMetrics::RecordPull(const absl::Status& outcome, uint64_t bytes,
                               absl::Duration wait, absl::Duration latency) {
  if (!outcome.ok()) {
    RefusedSeries(pull_refused_, outcome.code()).Increment();
    return;
  }
  pulls_.Increment();
  pull_bytes_.Increment(static_cast<double>(bytes));
  pull_seconds_.Observe(absl::ToDoubleSeconds(latency));
  pull_wait_seconds_.Observe(absl::ToDoubleSeconds(wait));
}

void ServerMetrics::RecordWaitFor(absl::Span<const int> blocking,
                                  absl::Duration wait) {
  if (blocking.empty() || wait <= absl::ZeroDuration()) return;
  const double seconds = absl::ToDoubleSeconds(wait);
  absl::MutexLock lock(&mu_);
  for (int rank : blocking) {
    prometheus::Counter*& series = wait_for_rank_series_[rank];
    if (series == nullptr) {
      series = &wait_for_rank_.Add(
          {{"shard", std::to_string(shard_)}, {"rank", std::to_string(rank)}});
    }
    series->Increment(seconds);
  }
}

void ServerMetrics::RecordRegistration(int rank, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  auto [it, first] = incarnations_.try_emplace(rank, incarnation);
  if (first || it->second == incarnation) return;
  it->second = incarnation;
  worker_restarts_
      .Add({{"shard", std::to_string(shard_)}, {"rank", std::to_string(rank)}})
      .Increment();
}

void ServerMetrics::RecordCheckpoint(uint64_t version, absl::Time when) {
  absl::MutexLock lock(&mu_);
  last_checkpoint_ = when;
  checkpoint_timestamp_.Set(UnixSeconds(when));
  checkpoint_version_.Set(static_cast<double>(version));
}

void ServerMetrics::RecordRestored() { restored_.Set(1); }

std::optional<absl::Time> ServerMetrics::last_checkpoint() const {
  absl::MutexLock lock(&mu_);
  return last_checkpoint_;
}

void ServerMetrics::SetLocalTransportCounts(
    std::function<LocalTransportCounts()> read) {
  absl::MutexLock lock(&mu_);
  read_local_ = std::move(read);
}

std::optional<ServerMetrics::LocalTransportCounts>
ServerMetrics::local_transport_counts() const {
  absl::MutexLock lock(&mu_);
  if (!read_local_) return std::nullopt;
  return read_local_();
}

std::shared_ptr<prometheus::Collectable> ServerMetrics::ShardStateCollector(
    const ServerMetrics* metrics,
    std::function<std::optional<ShardState>()> read) {
  return std::make_shared<ShardCollector>(metrics, std::move(read));
}

}  // namespace ps::server
