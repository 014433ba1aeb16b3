#include "deploy/local/rendezvous_state.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1000);

RendezvousOptions TwoHosts() {
  RendezvousOptions options;
  options.job_id = "job-7";
  options.settings = {{"epochs", "1"}, {"mode", "sync"}};
  options.plan = *PlanHosts(2, 2, 2, 0);
  options.host_timeout = absl::Seconds(10);
  return options;
}

HostJoin Join(int index, std::map<std::string, std::string> settings = {
                             {"epochs", "1"}, {"mode", "sync"}}) {
  HostJoin join;
  join.host_index = index;
  join.num_hosts = 2;
  join.address = absl::StrCat("10.0.0.", index + 1);
  join.settings = std::move(settings);
  return join;
}

TEST(RendezvousStateTest, PlanOnceEveryHostJoinedWithAddresses) {
  RendezvousState state(TwoHosts(), kStart);
  absl::StatusOr<JoinProgress> first = state.Join(Join(0), kStart);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->plan.has_value());
  EXPECT_THAT(first->waiting_for, ElementsAre(1));
  ASSERT_TRUE(state.Join(Join(1), kStart).ok());
  absl::StatusOr<JoinProgress> again = state.Join(Join(0), kStart);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(again->plan.has_value());
  EXPECT_EQ(again->plan->job_id, "job-7");
  ASSERT_EQ(again->plan->hosts.size(), 2u);
  EXPECT_EQ(again->plan->hosts[1].address, "10.0.0.2");
  EXPECT_EQ(again->plan->hosts[1].first_rank, 1);
  EXPECT_EQ(again->plan->hosts[1].first_server, 1);
}

TEST(RendezvousStateTest, EachHostsStageLinkPortAndTheSecretAreInThePlan) {
  RendezvousOptions options = TwoHosts();
  options.stage_link_secret = "0123456789abcdef0123456789abcdef";
  RendezvousState state(options, kStart);
  HostJoin zero = Join(0);
  zero.stage_link_port = 41000;
  ASSERT_TRUE(state.Join(zero, kStart).ok());
  absl::StatusOr<JoinProgress> one = state.Join(Join(1), kStart);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(one->plan.has_value());
  EXPECT_EQ(one->plan->stage_link_secret, options.stage_link_secret);
  EXPECT_EQ(one->plan->hosts[0].stage_link_port, 41000);
  EXPECT_EQ(one->plan->hosts[1].stage_link_port, 0);
}

TEST(RendezvousStateTest, AHostPollingForThePlanGetsItAfterAnotherFailed) {
  RendezvousState state(TwoHosts(), kStart);
  ASSERT_TRUE(state.Join(Join(0), kStart).ok());
  ASSERT_TRUE(state.Join(Join(1), kStart).ok());
  // Host 1 had its plan and refused to go on before host 0 asked again.
  HostReport refused;
  refused.host_index = 1;
  refused.exit_code = 2;
  refused.failure = "this host's run directory holds another's shards";
  refused.bad_configuration = true;
  ASSERT_TRUE(state.Report(refused, kStart).ok());
  // Host 0 still gets the plan, to go on and report its own outcome.
  absl::StatusOr<JoinProgress> again = state.Join(Join(0), kStart);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->plan.has_value());
  // A host that never joined learns the failure instead.
  RendezvousState other(TwoHosts(), kStart);
  ASSERT_TRUE(other.Join(Join(0), kStart).ok());
  HostReport failed;
  failed.exit_code = 1;
  failed.failure = "failed";
  ASSERT_TRUE(other.Report(failed, kStart).ok());
  EXPECT_EQ(other.Join(Join(1), kStart).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RendezvousStateTest, AMismatchingFlagFailsEveryHostNamingHostAndFlag) {
  RendezvousState state(TwoHosts(), kStart);
  ASSERT_TRUE(state.Join(Join(0), kStart).ok());
  absl::StatusOr<JoinProgress> bad =
      state.Join(Join(1, {{"epochs", "2"}, {"mode", "sync"}}), kStart);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("host 1 (10.0.0.2) was given --epochs=2, but host 0 "
                        "--epochs=1"));
  // Host 0, still waiting, learns it too.
  EXPECT_EQ(state.Join(Join(0), kStart).status(), bad.status());
  EXPECT_THAT(
      state.Join(Join(1, {{"mode", "sync"}}), kStart).status().message(),
      HasSubstr("--epochs"));
}

TEST(RendezvousStateTest, MissingFlagAndHostCountAreNamed) {
  RendezvousState state(TwoHosts(), kStart);
  EXPECT_THAT(state.Join(Join(1, {{"epochs", "1"}}), kStart).status().message(),
              HasSubstr("was given no --mode, but host 0 --mode=sync"));
  RendezvousState other(TwoHosts(), kStart);
  HostJoin three = Join(1);
  three.num_hosts = 3;
  EXPECT_THAT(other.Join(three, kStart).status().message(),
              HasSubstr("--num_hosts=3, but host 0 --num_hosts=2"));
}

TEST(RendezvousStateTest, TwoHostsClaimingOneIndexFail) {
  RendezvousState state(TwoHosts(), kStart);
  ASSERT_TRUE(state.Join(Join(1), kStart).ok());
  HostJoin twin = Join(1);
  twin.address = "10.0.0.9";
  EXPECT_THAT(state.Join(twin, kStart).status().message(),
              HasSubstr("two hosts claim --host_index=1"));
}

TEST(RendezvousStateTest, ServersInShardOrderOnceAllTold) {
  RendezvousState state(TwoHosts(), kStart);
  ASSERT_TRUE(state.Join(Join(0), kStart).ok());
  ASSERT_TRUE(state.Join(Join(1), kStart).ok());
  auto none = state.Servers(1, {"10.0.0.2:5"}, kStart);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(state.Servers(0, {"a", "b"}, kStart).ok());
  auto all = state.Servers(0, {"10.0.0.1:4"}, kStart);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_TRUE(all->has_value());
  EXPECT_THAT(**all, ElementsAre("10.0.0.1:4", "10.0.0.2:5"));
}

TEST(RendezvousStateTest, ASilentHostIsLostAndNamedToTheOthers) {
  RendezvousState state(TwoHosts(), kStart);
  ASSERT_TRUE(state.Join(Join(0), kStart).ok());
  ASSERT_TRUE(state.Join(Join(1), kStart).ok());
  const absl::Time later = kStart + absl::Seconds(9);
  EXPECT_EQ(*state.Heartbeat(0, later), "");
  const absl::Time past = kStart + absl::Seconds(11);
  absl::StatusOr<std::string> failure = state.Heartbeat(0, past);
  ASSERT_TRUE(failure.ok()) << failure.status();
  EXPECT_THAT(*failure, HasSubstr("host 1 (10.0.0.2): its launcher stopped "
                                  "answering for 10s"));
  std::vector<HostStatus> status = state.Status(past);
  EXPECT_FALSE(status[0].settled);
  EXPECT_TRUE(status[1].settled);
  EXPECT_FALSE(status[1].lost.empty());
}

TEST(RendezvousStateTest,
     AReportedFailureIsTheJobsAndAHostThatReportedIsNotLost) {
  RendezvousState state(TwoHosts(), kStart);
  ASSERT_TRUE(state.Join(Join(0), kStart).ok());
  ASSERT_TRUE(state.Join(Join(1), kStart).ok());
  HostReport report;
  report.host_index = 1;
  report.exit_code = 1;
  report.failure = "worker 1 exited with code 1: boom";
  ASSERT_TRUE(state.Report(report, kStart).ok());
  const absl::Time much_later = kStart + absl::Minutes(5);
  EXPECT_EQ(*state.Heartbeat(0, much_later),
            "host 1 (10.0.0.2): worker 1 exited with code 1: boom");
  std::vector<HostStatus> status = state.Status(much_later);
  EXPECT_TRUE(status[1].settled);
  EXPECT_EQ(status[1].lost, "");
  EXPECT_EQ(status[1].report, report);
  EXPECT_FALSE(state.Servers(0, {"x"}, much_later).ok());
}

TEST(RendezvousStateTest, CallsBeforeJoiningOrOutOfRangeAreRefused) {
  RendezvousState state(TwoHosts(), kStart);
  EXPECT_FALSE(state.Heartbeat(1, kStart).ok());
  EXPECT_FALSE(state.Heartbeat(7, kStart).ok());
  HostReport report;
  report.host_index = -1;
  EXPECT_FALSE(state.Report(report, kStart).ok());
}

}  // namespace
}  // namespace ps
