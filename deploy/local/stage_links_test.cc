#include "deploy/local/stage_links.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/status_testing.h"
#include "deploy/local/host_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

// PlanHosts' shares with addresses 10.0.0.(i+1) and ports 4000 + i.
std::vector<HostShare> Hosts(int num_hosts, int num_workers, int servers = 1) {
  std::vector<HostShare> hosts =
      *PlanHosts(num_hosts, num_workers, servers, /*server_hosts=*/0);
  for (size_t i = 0; i < hosts.size(); ++i) {
    hosts[i].address = "10.0.0." + std::to_string(i + 1);
    hosts[i].stage_link_port = 4000 + static_cast<int>(i);
  }
  return hosts;
}

TEST(StageLinksTest, TwoStagesOnTwoHostsLinkOverTcp) {
  const std::vector<HostShare> hosts = Hosts(2, 2);
  EXPECT_EQ(CrossHostListener(hosts[0], 2, 2), 0);
  EXPECT_EQ(CrossHostConnector(hosts[0], 2), -1);
  EXPECT_EQ(CrossHostListener(hosts[1], 2, 2), -1);
  EXPECT_EQ(CrossHostConnector(hosts[1], 2), 1);
  absl::StatusOr<StageLinkPlan> zero = PlanStageLinks(hosts, 0, 2, 2, kSecret);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->listen, (std::map<int, std::string>{{0, "10.0.0.1:4000"}}));
  EXPECT_TRUE(zero->previous.empty());
  EXPECT_EQ(zero->secret, kSecret);
  absl::StatusOr<StageLinkPlan> one = PlanStageLinks(hosts, 1, 2, 2, kSecret);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(one->listen.empty());
  EXPECT_EQ(one->previous, (std::map<int, std::string>{{1, "10.0.0.1:4000"}}));
}

TEST(StageLinksTest, ThreeStagesOnTwoHostsKeepTheSameHostLinkOnTheSocket) {
  // Host 0 runs stages 0 and 1 (linked on its socket), host 1 stage 2.
  const std::vector<HostShare> hosts = Hosts(2, 3);
  absl::StatusOr<StageLinkPlan> zero = PlanStageLinks(hosts, 0, 3, 3, kSecret);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->listen, (std::map<int, std::string>{{1, "10.0.0.1:4000"}}));
  EXPECT_TRUE(zero->previous.empty());
  absl::StatusOr<StageLinkPlan> one = PlanStageLinks(hosts, 1, 3, 3, kSecret);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->previous, (std::map<int, std::string>{{2, "10.0.0.1:4000"}}));
}

TEST(StageLinksTest, AMiddleHostListensAndConnects) {
  const std::vector<HostShare> hosts = Hosts(3, 3);
  absl::StatusOr<StageLinkPlan> one = PlanStageLinks(hosts, 1, 3, 3, kSecret);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->listen, (std::map<int, std::string>{{1, "10.0.0.2:4001"}}));
  EXPECT_EQ(one->previous, (std::map<int, std::string>{{1, "10.0.0.1:4000"}}));
}

TEST(StageLinksTest, WholeReplicasPerHostCrossNoHost) {
  // 2 replicas of 2 stages on 2 hosts: each host runs one replica.
  const std::vector<HostShare> hosts = Hosts(2, 4);
  EXPECT_FALSE(AnyCrossHostLink(hosts, 4, 2));
  for (int host = 0; host < 2; ++host) {
    absl::StatusOr<StageLinkPlan> plan = PlanStageLinks(hosts, host, 4, 2, "");
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(plan->empty());
  }
  // 2 replicas of 3 stages on 4 hosts: ranks 0-1, 2-3, 4, 5.
  const std::vector<HostShare> split = Hosts(4, 6);
  EXPECT_TRUE(AnyCrossHostLink(split, 6, 3));
  EXPECT_EQ(CrossHostListener(split[0], 6, 3), 1);
  // Host 1 ends replica 0 (rank 2) and starts replica 1 (rank 3, whose
  // stage 1 is on host 2).
  EXPECT_EQ(CrossHostConnector(split[1], 3), 2);
  EXPECT_EQ(CrossHostListener(split[1], 6, 3), 3);
  EXPECT_EQ(CrossHostConnector(split[2], 3), 4);
  EXPECT_EQ(CrossHostListener(split[2], 6, 3), 4);
  EXPECT_EQ(CrossHostConnector(split[3], 3), 5);
}

TEST(StageLinksTest, APlanWithoutPortOrSecretIsRefused) {
  std::vector<HostShare> hosts = Hosts(2, 2);
  hosts[0].stage_link_port = 0;
  ::ps::testing::ExpectInvalid(PlanStageLinks(hosts, 1, 2, 2, kSecret).status(),
                               "gave no port");
  ::ps::testing::ExpectInvalid(
      PlanStageLinks(Hosts(2, 2), 1, 2, 2, "").status(), "no secret");
}

TEST(StageLinksTest, AReservedPortIsFreeToBindAgain) {
  absl::StatusOr<int> port = ReserveStageLinkPort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  absl::StatusOr<int> again = ReserveStageLinkPort("127.0.0.1");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_THAT(ReserveStageLinkPort("no such host.invalid").status().message(),
              HasSubstr("reserving a port for a stage link"));
}

}  // namespace
}  // namespace ps
