#include "server/server_metrics_endpoint.h"

#include <optional>
#include <utility>

#include "server/shard_report.h"
#include "spdlog/spdlog.h"

namespace ps::server {

ServerMetricsEndpoint::ServerMetricsEndpoint(
    std::unique_ptr<MetricsEndpoint> endpoint, int server_index)
    : metrics_(
          std::make_unique<ServerMetrics>(endpoint->registry(), server_index)),
      endpoint_(std::move(endpoint)) {}

absl::StatusOr<std::unique_ptr<ServerMetricsEndpoint>>
ServerMetricsEndpoint::Start(absl::string_view host, int port, int server_index,
                             const ShardHost* shards) {
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> started =
      MetricsEndpoint::Start(host, port);
  if (!started.ok()) return started.status();
  // Not make_unique: the constructor is private.
  std::unique_ptr<ServerMetricsEndpoint> endpoint(
      new ServerMetricsEndpoint(*std::move(started), server_index));
  endpoint->endpoint_->Add(ServerMetrics::ShardStateCollector(
      endpoint->metrics_.get(),
      [shards]() -> std::optional<ServerMetrics::ShardState> {
        const DeclaredShard* shard = shards->get();
        if (shard == nullptr) return std::nullopt;
        const MembersSnapshot members = shard->coordinator->Members();
        const ShardReport report = shard->coordinator->ReportFields();
        return ServerMetrics::ShardState{
            shard->coordinator->version(),
            shard->coordinator->staleness().state(),
            members.next_steps,
            members.dead,
            members.unheard,
            report.updates_replayed,
            report.updates_lost};
      }));
  spdlog::info("serving metrics on {}", endpoint->endpoint_->url());
  return endpoint;
}

}  // namespace ps::server
