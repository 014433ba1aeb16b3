#include "client/heartbeats.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "grpcpp/client_context.h"

namespace ps::client_internal {

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
  absl::Time last_warning = absl::InfinitePast();
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping), period)) {
    mu_.Unlock();
    for (ShardChannel* shard : shards_) {
      proto::HeartbeatRequest request;
      *request.mutable_header() = shard->Header();
      request.set_incarnation(shard->incarnation());
      request.set_clock(clock_.load());
      proto::HeartbeatResponse response;
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + period));
      const absl::Status status =
          FromGrpcStatus(shard->stub().Heartbeat(&context, request, &response));
      if (status.ok()) shard->LearnLocalEndpoint(response.local_endpoint());
      // A shard that is down or restarting fails every beat: once in a
      // while is enough to say so.
      if (!status.ok() && absl::Now() - last_warning > absl::Seconds(10)) {
        last_warning = absl::Now();
        spdlog::warn("heartbeat: {}", shard->Annotate(status).ToString());
      }
    }
    mu_.Lock();
  }
}

}  // namespace ps::client_internal
