#include "deploy/local/host_layout.h"

#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

HostShare Share(int first_rank, int num_workers, int first_server,
                int num_servers) {
  HostShare share;
  share.first_rank = first_rank;
  share.num_workers = num_workers;
  share.first_server = first_server;
  share.num_servers = num_servers;
  return share;
}

TEST(PlanHostsTest, OneHostRunsEverything) {
  absl::StatusOr<std::vector<HostShare>> plan = PlanHosts(1, 3, 2, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan, std::vector<HostShare>{Share(0, 3, 0, 2)});
}

TEST(PlanHostsTest, CoLocatedSplitsBothInBlocksFirstHostsTakingMore) {
  absl::StatusOr<std::vector<HostShare>> plan = PlanHosts(2, 5, 3, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan,
            (std::vector<HostShare>{Share(0, 3, 0, 2), Share(3, 2, 2, 1)}));
}

TEST(PlanHostsTest, CoLocatedMayLeaveAHostWithoutShard) {
  absl::StatusOr<std::vector<HostShare>> plan = PlanHosts(3, 3, 1, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan, (std::vector<HostShare>{Share(0, 1, 0, 1), Share(1, 1, 1, 0),
                                           Share(2, 1, 1, 0)}));
}

TEST(PlanHostsTest, ServerHostsComeFirstAndRunOnlyShards) {
  absl::StatusOr<std::vector<HostShare>> plan = PlanHosts(4, 2, 2, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan,
            (std::vector<HostShare>{Share(0, 0, 0, 1), Share(0, 0, 1, 1),
                                    Share(0, 1, 0, 0), Share(1, 1, 0, 0)}));
}

TEST(PlanHostsTest, RefusesHostsWithNothingToDo) {
  EXPECT_THAT(PlanHosts(0, 2, 2, 0).status().message(),
              HasSubstr("--num_hosts must be at least 1, got 0"));
  EXPECT_THAT(PlanHosts(3, 2, 2, 0).status().message(),
              HasSubstr("--num_workers=2 is fewer than the 3 hosts"));
  EXPECT_THAT(PlanHosts(2, 2, 2, 2).status().message(),
              HasSubstr("--server_hosts must be in [0, --num_hosts - 1]"));
  EXPECT_THAT(PlanHosts(1, 2, 2, 1).status().message(),
              HasSubstr("--server_hosts"));
  EXPECT_THAT(PlanHosts(3, 2, 1, 2).status().message(),
              HasSubstr("--num_servers=1 is fewer than --server_hosts=2"));
  EXPECT_EQ(PlanHosts(2, 1, 1, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostNameTest, NamesTheAddressOnceKnown) {
  EXPECT_EQ(HostName(1, "10.250.89.2"), "host 1 (10.250.89.2)");
  EXPECT_EQ(HostName(1, ""), "host 1");
}

}  // namespace
}  // namespace ps
