#include "server/server_metrics.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "common/metrics_http.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/server_stats.h"

namespace ps::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ServerMetricsTest : public ::testing::Test {
 protected:
  std::string Scrape() const { return SerializeMetrics(*registry_); }

  std::shared_ptr<prometheus::Registry> registry_ =
      std::make_shared<prometheus::Registry>();
  ServerMetrics metrics_{registry_, 2};
  ServerStats stats_{&metrics_};
};

TEST_F(ServerMetricsTest, CountsAcceptedCallsAndRefusalsByReason) {
  stats_.RecordPush(absl::OkStatus(), 4096, absl::Milliseconds(1),
                    absl::Milliseconds(3));
  stats_.RecordPush(absl::OkStatus(), 4096, absl::Milliseconds(1),
                    absl::Milliseconds(30));
  stats_.RecordPush(absl::AbortedError("stale step"), 100, absl::ZeroDuration(),
                    absl::Milliseconds(1));
  stats_.RecordPull(absl::OkStatus(), 8192, absl::Milliseconds(2),
                    absl::Milliseconds(4));
  stats_.RecordPull(absl::ResourceExhaustedError("too many calls"), 0,
                    absl::ZeroDuration(), absl::ZeroDuration());
  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("ps_server_push_total{shard=\"2\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("ps_server_push_bytes_total{shard=\"2\"} 8192\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_pull_total{shard=\"2\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("ps_server_pull_bytes_total{shard=\"2\"} 8192\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_refused_total{call=\"push\",reason="
                              "\"aborted\",shard=\"2\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_refused_total{call=\"pull\",reason="
                              "\"resource_exhausted\",shard=\"2\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_refused_total{call=\"pull\",reason="
                              "\"aborted\",shard=\"2\"} 0\n"));
  // Only accepted pushes are timed: 3 ms and 30 ms.
  EXPECT_THAT(text, HasSubstr("ps_server_push_duration_seconds_count{shard="
                              "\"2\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_push_duration_seconds_bucket{shard="
                              "\"2\",le=\"0.005\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_push_duration_seconds_bucket{shard="
                              "\"2\",le=\"0.05\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_pull_wait_seconds_count{shard=\"2\"} "
                              "1\n"));
  // The report counts as before.
  EXPECT_THAT(stats_.ToString(), HasSubstr("pushes: 2 ok, 1 refused"));
}

TEST_F(ServerMetricsTest, AttributesWaitsToTheRanksWaitedFor) {
  stats_.RecordWaitFor({1, 3}, absl::Milliseconds(500));
  stats_.RecordWaitFor({3}, absl::Milliseconds(250));
  stats_.RecordWaitFor({}, absl::Seconds(1));
  stats_.RecordWaitFor({0}, absl::ZeroDuration());
  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("ps_server_wait_for_rank_seconds_total{rank="
                              "\"1\",shard=\"2\"} 0.5\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_wait_for_rank_seconds_total{rank="
                              "\"3\",shard=\"2\"} 0.75\n"));
  EXPECT_THAT(text, Not(HasSubstr("rank=\"0\"")));
}

TEST_F(ServerMetricsTest, CountsARestartWhenARankRegistersAsANewProcess) {
  stats_.RecordRegistration(0, 11);
  stats_.RecordRegistration(1, 21);
  // The same process again (e.g. after this shard restarted): no restart.
  stats_.RecordRegistration(0, 11);
  EXPECT_THAT(Scrape(), Not(HasSubstr("ps_server_worker_restarts_total{")));
  stats_.RecordRegistration(1, 22);
  stats_.RecordRegistration(1, 23);
  EXPECT_THAT(Scrape(), HasSubstr("ps_server_worker_restarts_total{rank=\"1\","
                                  "shard=\"2\"} 2\n"));
}

TEST_F(ServerMetricsTest, ExportsTheShardStateReadAtScrape) {
  StalenessHistogram staleness;
  for (uint64_t s : {0, 0, 0, 1, 5, 40, 1000}) staleness.Add(s);
  bool declared = false;
  auto collector = ServerMetrics::ShardStateCollector(
      &metrics_, [&]() -> std::optional<ServerMetrics::ShardState> {
        if (!declared) return std::nullopt;
        return ServerMetrics::ShardState{17, staleness.state()};
      });
  EXPECT_EQ(SerializeMetrics(*collector), "");

  declared = true;
  const std::string text = SerializeMetrics(*collector);
  EXPECT_THAT(text, HasSubstr("ps_server_version{shard=\"2\"} 17\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_staleness_updates_count{shard=\"2\"} "
                              "7\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_staleness_updates_sum{shard=\"2\"} "
                              "1046\n"));
  for (const auto& [le, count] :
       std::vector<std::pair<std::string, int>>{{"0", 3},
                                                {"1", 4},
                                                {"4", 4},
                                                {"6", 5},
                                                {"31", 5},
                                                {"63", 6},
                                                {"511", 6},
                                                {"1023", 7},
                                                {"+Inf", 7}}) {
    EXPECT_THAT(text,
                HasSubstr(absl::StrCat(
                    "ps_server_staleness_updates_bucket{shard=\"2\",le=\"", le,
                    "\"} ", count, "\n")))
        << text;
  }
  EXPECT_THAT(text, Not(HasSubstr("ps_server_checkpoint_age_seconds")));
  metrics_.RecordCheckpoint(12, absl::Now() - absl::Seconds(30));
  EXPECT_THAT(SerializeMetrics(*collector),
              HasSubstr("ps_server_checkpoint_age_seconds{shard=\"2\"} 3"));
  EXPECT_THAT(Scrape(),
              HasSubstr("ps_server_checkpoint_version{shard=\"2\"} 12\n"));
}

TEST_F(ServerMetricsTest, NamesEachRanksStepsAndDeathAndTheUnheard) {
  auto collector = ServerMetrics::ShardStateCollector(
      &metrics_, [&]() -> std::optional<ServerMetrics::ShardState> {
        ServerMetrics::ShardState state;
        state.next_steps = {40, 4, 41};
        state.dead = {false, true, false};
        state.unheard = 2;
        state.updates_replayed = 23;
        return state;
      });
  const std::string text = SerializeMetrics(*collector);
  EXPECT_THAT(text, HasSubstr("ps_server_rank_next_step{rank=\"0\",shard="
                              "\"2\"} 40\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_rank_next_step{rank=\"1\",shard="
                              "\"2\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_rank_next_step{rank=\"2\",shard="
                              "\"2\"} 41\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_rank_dead{rank=\"0\",shard=\"2\"} "
                              "0\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_rank_dead{rank=\"1\",shard=\"2\"} "
                              "1\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_workers_unheard{shard=\"2\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_updates_replayed{shard=\"2\"} 23\n"));
  EXPECT_THAT(text, HasSubstr("ps_server_updates_lost{shard=\"2\"} 0\n"));
}

TEST_F(ServerMetricsTest, LeavesOutRecoveryFiguresNotKnown) {
  auto collector = ServerMetrics::ShardStateCollector(
      &metrics_, [&]() -> std::optional<ServerMetrics::ShardState> {
        ServerMetrics::ShardState state;
        state.updates_lost.reset();  // Restored without a log.
        return state;
      });
  const std::string text = SerializeMetrics(*collector);
  EXPECT_THAT(text, Not(HasSubstr("ps_server_updates_replayed")));
  EXPECT_THAT(text, Not(HasSubstr("ps_server_updates_lost")));
  EXPECT_THAT(text, HasSubstr("ps_server_version{shard=\"2\"} 0\n"));
}

TEST_F(ServerMetricsTest, ExportsTheSameHostTransportsCountsWhileItServes) {
  auto collector = ServerMetrics::ShardStateCollector(
      &metrics_, []() -> std::optional<ServerMetrics::ShardState> {
        return std::nullopt;
      });
  EXPECT_THAT(SerializeMetrics(*collector),
              Not(HasSubstr("ps_server_local_calls_total")));
  int64_t calls = 5;
  metrics_.SetLocalTransportCounts([&calls] {
    return ServerMetrics::LocalTransportCounts{calls, 2, 3, 1};
  });
  std::string text = SerializeMetrics(*collector);
  EXPECT_THAT(text, HasSubstr("ps_server_local_calls_total{shard=\"2\"} 5\n"));
  EXPECT_THAT(text,
              HasSubstr("ps_server_tcp_frame_calls_total{shard=\"2\"} 3\n"));
  EXPECT_THAT(
      text,
      HasSubstr("ps_server_tcp_frame_connections_total{shard=\"2\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("ps_server_local_connections_total{shard=\"2\"} 2\n"));
  calls = 9;  // Read at each scrape.
  EXPECT_THAT(SerializeMetrics(*collector),
              HasSubstr("ps_server_local_calls_total{shard=\"2\"} 9\n"));
  metrics_.SetLocalTransportCounts(nullptr);
  EXPECT_THAT(SerializeMetrics(*collector),
              Not(HasSubstr("ps_server_local_calls_total")));
}

TEST_F(ServerMetricsTest, WithoutMetricsTheStatsOnlyCount) {
  ServerStats plain;
  EXPECT_FALSE(plain.exports_metrics());
  plain.RecordPush(absl::OkStatus(), 1, absl::ZeroDuration(),
                   absl::ZeroDuration());
  plain.RecordWaitFor({1}, absl::Seconds(1));
  plain.RecordRegistration(0, 1);
  EXPECT_EQ(plain.pushes_accepted(), 1u);
  EXPECT_TRUE(stats_.exports_metrics());
}

}  // namespace
}  // namespace ps::server
