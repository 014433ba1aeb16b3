#include "deploy/local/rendezvous_wire.h"

#include <cmath>
#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

TEST(RendezvousWireTest, JoinRoundTrips) {
  HostJoin join;
  join.host_index = 2;
  join.num_hosts = 3;
  join.address = "10.0.0.3";
  join.settings = {{"epochs", "2"}, {"mode", "sync"}};
  join.stage_link_port = 41234;
  absl::StatusOr<HostJoin> read = ReadJoin(WriteJoin(join));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, join);
}

TEST(RendezvousWireTest, JoinReaderRefusesWhatNoLauncherSends) {
  HostJoin join;
  join.address = "a";
  join.num_hosts = 2;
  join.host_index = 2;
  EXPECT_THAT(ReadJoin(WriteJoin(join)).status().message(),
              HasSubstr("host_index 2 is not in [0, 2)"));
  join.host_index = 0;
  join.num_hosts = 0;
  EXPECT_THAT(ReadJoin(WriteJoin(join)).status().message(),
              HasSubstr("num_hosts 0"));
  join.num_hosts = 1;
  join.address = "";
  EXPECT_THAT(ReadJoin(WriteJoin(join)).status().message(),
              HasSubstr("address"));
  join.address = "a";
  join.stage_link_port = 70000;
  EXPECT_THAT(ReadJoin(WriteJoin(join)).status().message(),
              HasSubstr("stage_link_port 70000"));
}

TEST(RendezvousWireTest, PlanRoundTripsAndIncompleteStaysEmpty) {
  JobPlan plan;
  plan.job_id = "job-1";
  HostShare a;
  a.address = "10.0.0.1";
  a.num_servers = 1;
  HostShare b;
  b.address = "10.0.0.2";
  b.first_rank = 0;
  b.num_workers = 2;
  b.first_server = 1;
  b.stage_link_port = 41234;
  plan.hosts = {a, b};
  plan.stage_link_secret = "0123456789abcdef0123456789abcdef";
  absl::StatusOr<JoinProgress> read = ReadPlan(WritePlan({plan, {}}));
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->plan.has_value());
  EXPECT_EQ(*read->plan, plan);

  const JoinProgress waiting{std::nullopt, {1, 3}};
  absl::StatusOr<JoinProgress> none = ReadPlan(WritePlan(waiting));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, waiting);

  rendezvous::JoinResponse negative = WritePlan({plan, {}});
  negative.mutable_hosts(1)->set_num_workers(-1);
  EXPECT_FALSE(ReadPlan(negative).ok());
  rendezvous::JoinResponse no_port = WritePlan({plan, {}});
  no_port.mutable_hosts(1)->set_stage_link_port(65536);
  EXPECT_THAT(ReadPlan(no_port).status().message(),
              HasSubstr("stage_link_port 65536"));
}

TEST(RendezvousWireTest, ReportAndStatusRoundTrip) {
  HostReport failed;
  failed.host_index = 1;
  failed.exit_code = 1;
  failed.failure = "worker 1 exited with code 3: unreachable";
  failed.processes = {"server 1 stopped by the launcher",
                      "worker 1 exited with code 3"};
  HostReport done;
  done.final_test_accuracy = 0.8125;
  absl::StatusOr<HostReport> read = ReadReport(WriteReport(failed));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, failed);

  std::vector<HostStatus> hosts(3);
  hosts[0].settled = true;
  hosts[0].report = done;
  hosts[1].host_index = 1;
  hosts[1].settled = true;
  hosts[1].lost = "stopped answering";
  hosts[2].host_index = 2;
  absl::StatusOr<std::vector<HostStatus>> status =
      ReadStatus(WriteStatus(hosts));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, hosts);
}

TEST(RendezvousWireTest, ReportReaderRefusesInconsistentOutcomes) {
  HostReport report;
  report.exit_code = 1;
  EXPECT_THAT(ReadReport(WriteReport(report)).status().message(),
              HasSubstr("failure"));
  report.exit_code = 300;
  report.failure = "x";
  EXPECT_FALSE(ReadReport(WriteReport(report)).ok());
  report.exit_code = 0;
  report.failure = "";
  report.final_test_accuracy = std::nan("");
  EXPECT_FALSE(ReadReport(WriteReport(report)).ok());
}

}  // namespace
}  // namespace ps
