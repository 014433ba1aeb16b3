#include "server/server_stats.h"

#include <algorithm>
#include <string>

#include "absl/numeric/bits.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/server_metrics.h"

namespace ps::server {

int StalenessHistogram::BucketOf(uint64_t staleness) {
  if (staleness < kExactBuckets) return static_cast<int>(staleness);
  // 32..63 -> 32, 64..127 -> 33, ..., 2^63.. -> 90.
  const int log2 = 63 - absl::countl_zero(staleness);
  return kExactBuckets + (log2 - 5);
}

void StalenessHistogram::Add(uint64_t staleness) {
  absl::MutexLock lock(&mu_);
  ++buckets_[BucketOf(staleness)];
  ++count_;
  max_ = std::max(max_, staleness);
  sum_ += static_cast<double>(staleness);
}

uint64_t StalenessHistogram::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

uint64_t StalenessHistogram::max() const {
  absl::MutexLock lock(&mu_);
  return max_;
}

double StalenessHistogram::mean() const {
  absl::MutexLock lock(&mu_);
  return count_ == 0 ? 0.0 : sum_ / static_cast<double>(count_);
}

uint64_t StalenessHistogram::CountInBucketOf(uint64_t staleness) const {
  absl::MutexLock lock(&mu_);
  return buckets_[BucketOf(staleness)];
}

std::string StalenessHistogram::ToString() const {
  absl::MutexLock lock(&mu_);
  std::string out = absl::StrFormat(
      "staleness (updates: %d, mean %.2f, max %d):", count_,
      count_ == 0 ? 0.0 : sum_ / static_cast<double>(count_), max_);
  for (int b = 0; b < kNumBuckets; ++b) {
    if (buckets_[b] == 0) continue;
    if (b < kExactBuckets) {
      absl::StrAppend(&out, " ", b, ":", buckets_[b]);
    } else {
      const int log2 = b - kExactBuckets + 5;
      const uint64_t lo = uint64_t{1} << log2;
      const uint64_t hi = log2 == 63 ? UINT64_MAX : (lo << 1) - 1;
      absl::StrAppend(&out, " ", lo, "-", hi, ":", buckets_[b]);
    }
  }
  if (count_ == 0) absl::StrAppend(&out, " none");
  return out;
}

StalenessHistogram::State StalenessHistogram::state() const {
  absl::MutexLock lock(&mu_);
  State s;
  s.buckets = buckets_;
  s.count = count_;
  s.max = max_;
  s.sum = sum_;
  return s;
}

void StalenessHistogram::Restore(const State& state) {
  absl::MutexLock lock(&mu_);
  buckets_ = state.buckets;
  count_ = state.count;
  max_ = state.max;
  sum_ = state.sum;
}

void ServerStats::Record(Counter& c, bool ok, uint64_t bytes,
                         absl::Duration latency) {
  ++(ok ? c.ok : c.refused);
  c.bytes += bytes;
  c.total_latency += latency;
  c.max_latency = std::max(c.max_latency, latency);
}

void ServerStats::RecordPush(const absl::Status& outcome, uint64_t bytes,
                             absl::Duration commit, absl::Duration latency) {
  if (metrics_ != nullptr) metrics_->RecordPush(outcome, bytes, latency);
  absl::MutexLock lock(&mu_);
  Record(push_, outcome.ok(), bytes, latency);
  push_.total_part += commit;
}

void ServerStats::RecordPull(const absl::Status& outcome, uint64_t bytes,
                             absl::Duration wait, absl::Duration latency) {
  if (metrics_ != nullptr) metrics_->RecordPull(outcome, bytes, wait, latency);
  absl::MutexLock lock(&mu_);
  Record(pull_, outcome.ok(), bytes, latency);
  pull_.total_part += wait;
}

void ServerStats::RecordWaitFor(absl::Span<const int> blocking,
                                absl::Duration wait) {
  if (metrics_ != nullptr) metrics_->RecordWaitFor(blocking, wait);
}

void ServerStats::RecordRegistration(int rank, uint64_t incarnation) {
  if (metrics_ != nullptr) metrics_->RecordRegistration(rank, incarnation);
}

uint64_t ServerStats::pushes_accepted() const {
  absl::MutexLock lock(&mu_);
  return push_.ok;
}
uint64_t ServerStats::pushes_refused() const {
  absl::MutexLock lock(&mu_);
  return push_.refused;
}
uint64_t ServerStats::pulls_served() const {
  absl::MutexLock lock(&mu_);
  return pull_.ok;
}
uint64_t ServerStats::pulls_refused() const {
  absl::MutexLock lock(&mu_);
  return pull_.refused;
}

std::string ServerStats::Format(const char* name, const char* bytes_verb,
                                const char* part_name, const Counter& c) {
  const uint64_t calls = c.ok + c.refused;
  const double mean_ms = calls == 0
                             ? 0.0
                             : absl::ToDoubleMilliseconds(c.total_latency) /
                                   static_cast<double>(calls);
  const double part_ms = calls == 0 ? 0.0
                                    : absl::ToDoubleMilliseconds(c.total_part) /
                                          static_cast<double>(calls);
  return absl::StrFormat(
      "%s: %d ok, %d refused, %.1f MiB %s, latency mean %.2f ms (%s %.2f ms) "
      "max %.2f ms",
      name, c.ok, c.refused, static_cast<double>(c.bytes) / (1 << 20),
      bytes_verb, mean_ms, part_name, part_ms,
      absl::ToDoubleMilliseconds(c.max_latency));
}

RequestFigures ServerStats::Figures(const Counter& c) {
  const uint64_t calls = c.ok + c.refused;
  const auto mean_us = [calls](absl::Duration total) -> uint64_t {
    return calls == 0
               ? 0
               : static_cast<uint64_t>(absl::ToInt64Microseconds(total)) /
                     calls;
  };
  return {c.ok, c.refused, mean_us(c.total_latency),
          static_cast<uint64_t>(absl::ToInt64Microseconds(c.max_latency)),
          mean_us(c.total_part)};
}

RequestFigures ServerStats::push_figures() const {
  absl::MutexLock lock(&mu_);
  return Figures(push_);
}

RequestFigures ServerStats::pull_figures() const {
  absl::MutexLock lock(&mu_);
  return Figures(pull_);
}

std::string ServerStats::ToString() const {
  absl::MutexLock lock(&mu_);
  return absl::StrCat(Format("pushes", "received", "committing", push_), "\n",
                      Format("pulls", "sent", "waiting", pull_));
}

}  // namespace ps::server
