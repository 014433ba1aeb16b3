#ifndef PS_SERVER_SERVER_METRICS_ENDPOINT_H_
#define PS_SERVER_SERVER_METRICS_ENDPOINT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/metrics_http.h"
#include "server/server_metrics.h"
#include "server/shard_host.h"

namespace ps::server {

// The server's Prometheus endpoint (--metrics_host, --metrics_port): what
// the calls and checkpoints count (ServerMetrics) and, read from the
// shard at each scrape, its version and staleness (nothing of them before
// the model is declared).
//
// Thread-safe as MetricsEndpoint is. The HTTP server stops in the
// destructor; `shards` must outlive it.
class ServerMetricsEndpoint {
 public:
  // Listens on `host`:`port` (0 picks a free one) and logs the URL;
  // MetricsEndpoint::Start's errors.
  static absl::StatusOr<std::unique_ptr<ServerMetricsEndpoint>> Start(
      absl::string_view host, int port, int server_index,
      const ShardHost* shards);

  ServerMetricsEndpoint(const ServerMetricsEndpoint&) = delete;
  ServerMetricsEndpoint& operator=(const ServerMetricsEndpoint&) = delete;

  // Where the service and the shard count. Shared: a shard's checkpointer
  // may count in it until the shard is destroyed, after this.
  const std::shared_ptr<ServerMetrics>& metrics() const { return metrics_; }
  int port() const { return endpoint_->port(); }

 private:
  ServerMetricsEndpoint(std::unique_ptr<MetricsEndpoint> endpoint,
                        int server_index);

  const std::shared_ptr<ServerMetrics> metrics_;
  // Declared last: stops first, so that no scrape outlives `metrics_`.
  const std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SERVER_METRICS_ENDPOINT_H_
