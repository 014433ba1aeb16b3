#include "deploy/local/rendezvous_client.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "deploy/local/rendezvous_server.h"
#include "deploy/local/rendezvous_state.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Bounds a hang only.
constexpr absl::Duration kWait = absl::Seconds(60);

RendezvousOptions TwoHosts() {
  RendezvousOptions options;
  options.job_id = "job-9";
  options.settings = {{"epochs", "1"}};
  options.plan = *PlanHosts(2, 2, 2, 0);
  options.host_timeout = absl::Minutes(5);
  return options;
}

HostJoin Join(int index) {
  HostJoin join;
  join.host_index = index;
  join.num_hosts = 2;
  join.address = absl::StrCat("127.0.0.", index + 1);
  join.settings = {{"epochs", "1"}};
  return join;
}

TEST(RendezvousClientTest, TwoHostsJoinExchangeServersAndReport) {
  RendezvousState state(TwoHosts(), absl::Now());
  absl::StatusOr<std::unique_ptr<RendezvousServer>> server =
      RendezvousServer::Start("127.0.0.1:0", &state);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
  RendezvousClient host0(address);
  RendezvousClient host1(address);

  absl::StatusOr<JobPlan> plan1;
  absl::StatusOr<std::vector<std::string>> servers1;
  std::thread other([&] {
    plan1 = host1.Join(Join(1), absl::Now() + kWait);
    if (plan1.ok()) {
      servers1 = host1.ExchangeServers(1, {"127.0.0.2:7"}, absl::Now() + kWait);
    }
  });
  absl::StatusOr<JobPlan> plan0 = host0.Join(Join(0), absl::Now() + kWait);
  ASSERT_TRUE(plan0.ok()) << plan0.status();
  absl::StatusOr<std::vector<std::string>> servers0 =
      host0.ExchangeServers(0, {"127.0.0.1:6"}, absl::Now() + kWait);
  other.join();
  ASSERT_TRUE(plan1.ok()) << plan1.status();
  EXPECT_EQ(*plan0, *plan1);
  EXPECT_EQ(plan0->job_id, "job-9");
  EXPECT_EQ(plan0->hosts[1].address, "127.0.0.2");
  ASSERT_TRUE(servers0.ok()) << servers0.status();
  ASSERT_TRUE(servers1.ok()) << servers1.status();
  EXPECT_THAT(*servers0, ElementsAre("127.0.0.1:6", "127.0.0.2:7"));
  EXPECT_EQ(*servers0, *servers1);

  absl::StatusOr<std::string> beat = host1.Heartbeat(1, kWait);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_EQ(*beat, "");
  HostReport report;
  report.host_index = 1;
  report.exit_code = 1;
  report.failure = "worker 1 exited with code 1: boom";
  ASSERT_TRUE(host1.Report(report, kWait).ok());
  absl::StatusOr<std::string> told = host0.Heartbeat(0, kWait);
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_EQ(*told, "host 1 (127.0.0.2): worker 1 exited with code 1: boom");
  absl::StatusOr<std::vector<HostStatus>> status = host0.Status(kWait);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->size(), 2u);
  EXPECT_FALSE((*status)[0].settled);
  EXPECT_EQ((*status)[1].report, report);
}

TEST(RendezvousClientTest, AMismatchReachesTheJoiningHostAsInvalidArgument) {
  RendezvousState state(TwoHosts(), absl::Now());
  absl::StatusOr<std::unique_ptr<RendezvousServer>> server =
      RendezvousServer::Start("127.0.0.1:0", &state);
  ASSERT_TRUE(server.ok()) << server.status();
  RendezvousClient client(absl::StrCat("127.0.0.1:", (*server)->port()));
  HostJoin join = Join(1);
  join.settings["epochs"] = "3";
  absl::StatusOr<JobPlan> plan = client.Join(join, absl::Now() + kWait);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("host 1 (127.0.0.2) was given --epochs=3"));
}

TEST(RendezvousClientTest, JoinGivesUpSayingWhoIsAwaited) {
  RendezvousState state(TwoHosts(), absl::Now());
  absl::StatusOr<std::unique_ptr<RendezvousServer>> server =
      RendezvousServer::Start("127.0.0.1:0", &state);
  ASSERT_TRUE(server.ok()) << server.status();
  RendezvousClient client(absl::StrCat("127.0.0.1:", (*server)->port()));
  absl::StatusOr<JobPlan> plan =
      client.Join(Join(0), absl::Now() + absl::Seconds(1));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(plan.status().message(), HasSubstr("host 1 did not join"));
}

TEST(RendezvousClientTest, ARendezvousThatNeverAnswersIsNamed) {
  // Port 1 on loopback: nothing listens there.
  RendezvousClient client("127.0.0.1:1");
  absl::StatusOr<JobPlan> plan =
      client.Join(Join(0), absl::Now() + absl::Seconds(1));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("the rendezvous at 127.0.0.1:1 did not answer"));
}

}  // namespace
}  // namespace ps
