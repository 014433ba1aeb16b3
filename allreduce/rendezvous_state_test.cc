#include "allreduce/rendezvous_state.h"

#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ps::allreduce {
namespace {

constexpr absl::Duration kLong = absl::Seconds(60);

TEST(RendezvousStateTest, JoinReturnsOnceEveryRankJoined) {
  RendezvousState state(3);
  absl::StatusOr<uint64_t> rounds[3];
  std::thread a([&] { rounds[1] = state.Join(1, kLong); });
  std::thread b([&] { rounds[2] = state.Join(2, kLong); });
  rounds[0] = state.Join(0, kLong);
  a.join();
  b.join();
  for (const auto& round : rounds) {
    ASSERT_TRUE(round.ok()) << round.status();
    EXPECT_EQ(*round, 0);
  }
}

TEST(RendezvousStateTest, JoinTimesOutWithoutTheOthers) {
  RendezvousState state(2);
  absl::StatusOr<uint64_t> round = state.Join(0, absl::Milliseconds(10));
  EXPECT_TRUE(absl::IsDeadlineExceeded(round.status())) << round.status();
}

TEST(RendezvousStateTest, RejectsRankOutsideTheRing) {
  RendezvousState state(2);
  EXPECT_TRUE(absl::IsInvalidArgument(state.Join(2, kLong).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(state.Join(-1, kLong).status()));
}

TEST(RendezvousStateTest, RestartedRankOpensTheNextRound) {
  RendezvousState state(2);
  std::thread a([&] { ASSERT_TRUE(state.Join(1, kLong).ok()); });
  ASSERT_EQ(*state.Join(0, kLong), 0);
  a.join();
  // Rank 1 restarts; rank 0, whose ring broke, joins again too.
  absl::StatusOr<uint64_t> restarted;
  std::thread b([&] { restarted = state.Join(1, kLong); });
  absl::StatusOr<uint64_t> survivor = state.Join(0, kLong);
  b.join();
  ASSERT_TRUE(survivor.ok()) << survivor.status();
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(*survivor, 1);
  EXPECT_EQ(*restarted, 1);
}

TEST(RendezvousStateTest, WaitingRankIsAbortedWhenItsRoundIsAbandoned) {
  RendezvousState state(2);
  absl::StatusOr<uint64_t> waiting;
  std::thread old_incarnation([&] { waiting = state.Join(0, kLong); });
  while (state.JoinedInCurrentRound() < 1)
    absl::SleepFor(absl::Milliseconds(1));
  // Rank 0 restarted before rank 1 came: its first call is abandoned.
  absl::StatusOr<uint64_t> restarted;
  std::thread new_incarnation([&] { restarted = state.Join(0, kLong); });
  old_incarnation.join();
  EXPECT_TRUE(absl::IsAborted(waiting.status())) << waiting.status();
  ASSERT_EQ(*state.Join(1, kLong), 1);
  new_incarnation.join();
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(*restarted, 1);
}

TEST(RendezvousStateTest, GetWaitsUntilEveryKeyIsSet) {
  RendezvousState state(1);
  std::thread setter([&] {
    state.Set("a", "1");
    state.Set("b", "2");
  });
  absl::StatusOr<std::vector<std::string>> values =
      state.Get({"b", "a"}, kLong);
  setter.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"2", "1"}));
}

TEST(RendezvousStateTest, GetTimesOutNamingTheMissingKey) {
  RendezvousState state(1);
  state.Set("a", "1");
  absl::StatusOr<std::vector<std::string>> values =
      state.Get({"a", "b"}, absl::Milliseconds(10));
  EXPECT_TRUE(absl::IsDeadlineExceeded(values.status()));
  EXPECT_NE(values.status().message().find("\"b\""), std::string::npos);
}

}  // namespace
}  // namespace ps::allreduce
