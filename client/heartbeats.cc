#include "client/heartbeats.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "grpcpp/client_context.h"

namespace ps::client_internal {
namespace {

constexpr absl::Duration kUnansweredReportPeriod = absl::Seconds(10);

}  // namespace

std::optional<std::string> UnansweredShard::Failed(absl::Time now,
                                                   const absl::Status& status) {
  if (!failing_since_.has_value()) failing_since_ = now;
  if (now < next_report_) return std::nullopt;
  next_report_ = now + report_period_;
  const absl::Duration failing_for =
      absl::Trunc(now - *failing_since_, absl::Seconds(1));
  return absl::StrCat(
      name_, " has not answered ",
      failing_for == absl::ZeroDuration()
          ? "a heartbeat"
          : absl::StrCat("heartbeats for ", absl::FormatDuration(failing_for)),
      " (", absl::StatusCodeToString(status.code()), ": ", status.message(),
      "); this worker waits for it");
}

std::optional<std::string> UnansweredShard::Answered(absl::Time now) {
  if (!failing_since_.has_value()) return std::nullopt;
  const absl::Duration failed_for = now - *failing_since_;
  failing_since_.reset();
  next_report_ = absl::InfinitePast();
  return absl::StrCat(
      name_, " answers heartbeats again after ",
      absl::FormatDuration(absl::Trunc(failed_for, absl::Seconds(1))));
}

Heartbeats::Heartbeats(std::vector<ShardChannel*> shards)
    : shards_(std::move(shards)) {}

Heartbeats::~Heartbeats() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Heartbeats::Start(absl::Duration period) {
  thread_ = std::thread([this, period] { Send(period); });
}

void Heartbeats::RaiseClock(uint64_t clock) {
  uint64_t seen = clock_.load();
  while (seen < clock && !clock_.compare_exchange_weak(seen, clock)) {
  }
}

void Heartbeats::Send(absl::Duration period) {
  auto stopping = [this]()
                      ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
  std::vector<UnansweredShard> unanswered;
  for (ShardChannel* shard : shards_) {
    unanswered.emplace_back(
        absl::StrCat("server ", shard->index(), " (", shard->address(), ")"),
        kUnansweredReportPeriod);
  }
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping), period)) {
    mu_.Unlock();
    for (size_t s = 0; s < shards_.size(); ++s) {
      ShardChannel* shard = shards_[s];
      proto::HeartbeatRequest request;
      *request.mutable_header() = shard->Header();
      request.set_incarnation(shard->incarnation());
      request.set_clock(clock_.load());
      proto::HeartbeatResponse response;
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + period));
      const absl::Status status =
          FromGrpcStatus(shard->stub().Heartbeat(&context, request, &response));
      if (status.ok()) {
        shard->LearnLocalEndpoint(response.local_endpoint());
        if (std::optional<std::string> line =
                unanswered[s].Answered(absl::Now())) {
          spdlog::info("{}", *line);
        }
      } else if (std::optional<std::string> line =
                     unanswered[s].Failed(absl::Now(), status)) {
        // A shard that is down, restarting or cut off fails every beat:
        // once in a while is enough to say so.
        spdlog::warn("{}", *line);
      }
    }
    mu_.Lock();
  }
}

}  // namespace ps::client_internal
