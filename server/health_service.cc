#include "server/health_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace ps::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

namespace {

// How often a Watch checks whether its caller has gone.
constexpr absl::Duration kWatchPoll = absl::Milliseconds(100);

}  // namespace

HealthService::HealthService(std::vector<std::string> services)
    : services_(std::move(services)) {}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
}

HealthService::ServingStatus HealthService::StatusLocked(
    const std::string& service) const {
  if (!service.empty() && std::find(services_.begin(), services_.end(),
                                    service) == services_.end()) {
    return HealthCheckResponse::SERVICE_UNKNOWN;
  }
  return shut_down_ ? HealthCheckResponse::NOT_SERVING
                    : HealthCheckResponse::SERVING;
}

grpc::Status HealthService::Check(grpc::ServerContext* /*context*/,
                                  const HealthCheckRequest* request,
                                  HealthCheckResponse* response) {
  absl::MutexLock lock(&mu_);
  const ServingStatus status = StatusLocked(request->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("unknown service \"", request->service(), "\""));
  }
  response->set_status(status);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(
    grpc::ServerContext* context, const HealthCheckRequest* request,
    grpc::ServerWriter<HealthCheckResponse>* writer) {
  bool sent = false;
  ServingStatus last = HealthCheckResponse::UNKNOWN;
  for (;;) {
    ServingStatus status;
    bool shut_down;
    {
      absl::MutexLock lock(&mu_);
      // Wakes at once on Shutdown, else polls for the caller leaving.
      if (sent) mu_.AwaitWithTimeout(absl::Condition(&shut_down_), kWatchPoll);
      status = StatusLocked(request->service());
      shut_down = shut_down_;
    }
    // Written without the lock: a slow reader must not hold up others.
    if (!sent || status != last) {
      HealthCheckResponse response;
      response.set_status(status);
      if (!writer->Write(response)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "watcher has gone");
      }
      sent = true;
      last = status;
    }
    if (shut_down) return grpc::Status::OK;
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
    }
  }
}

}  // namespace ps::server
