#include "server/server_metrics_endpoint.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/http_testing.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_config.h"
#include "server/server_config_testing.h"
#include "server/shard_builder.h"

namespace ps::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ServerMetricsEndpointTest : public ::testing::Test {
 protected:
  std::string Scrape(int port) {
    absl::StatusOr<std::string> body = ps::testing::HttpGet(port, "/metrics");
    EXPECT_TRUE(body.ok()) << body.status();
    return body.value_or("");
  }

  const ServerConfig config_ = testing::TestServerConfig();
  ShardBuilder builder_{config_, nullptr};
  ShardHost host_{builder_.ForDeclarations(), DeclarationLimits()};
};

TEST_F(ServerMetricsEndpointTest, ServesTheCountsAndTheShardOnceDeclared) {
  absl::StatusOr<std::unique_ptr<ServerMetricsEndpoint>> endpoint =
      ServerMetricsEndpoint::Start("127.0.0.1", 0, 3, &host_);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  ASSERT_GT(port, 0);
  std::string text = Scrape(port);
  EXPECT_THAT(text, HasSubstr("ps_server_start_time_seconds{shard=\"3\"}"));
  // No shard yet: nothing of its state.
  EXPECT_THAT(text, Not(HasSubstr("ps_server_version")));

  (*endpoint)->metrics()->RecordRestored();
  ModelSpec model;
  model.tensors.push_back(
      {"w", DType::kFloat32, {4}, InitializerSpec::Constant(1)});
  ASSERT_TRUE(host_.Declare(0, model).ok());
  text = Scrape(port);
  EXPECT_THAT(text, HasSubstr("ps_server_restored{shard=\"3\"} 1"));
  EXPECT_THAT(text, HasSubstr("ps_server_version{shard=\"3\"} 0"));
  // Every rank of the shard's membership, none dead yet.
  EXPECT_THAT(text, HasSubstr("ps_server_rank_next_step{rank=\"0\",shard="
                              "\"3\"} 0"));
  EXPECT_THAT(text, HasSubstr("ps_server_rank_dead{rank=\"0\",shard=\"3\"} 0"));
  EXPECT_THAT(text, HasSubstr("ps_server_workers_unheard{shard=\"3\"} 0"));
}

TEST_F(ServerMetricsEndpointTest, FailsOnAPortInUse) {
  absl::StatusOr<ps::testing::HeldPort> held = ps::testing::HeldPort::Listen();
  ASSERT_TRUE(held.ok()) << held.status();
  absl::StatusOr<std::unique_ptr<ServerMetricsEndpoint>> endpoint =
      ServerMetricsEndpoint::Start("127.0.0.1", held->port(), 0, &host_);
  EXPECT_FALSE(endpoint.ok());
  EXPECT_THAT(std::string(endpoint.status().message()),
              HasSubstr(absl::StrCat(held->port())));
}

}  // namespace
}  // namespace ps::server
