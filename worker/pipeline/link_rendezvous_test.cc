#include "worker/pipeline/link_rendezvous.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/local_socket.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"

namespace ps::worker::pipeline {
namespace {

uint64_t FreshKey() { return std::random_device()() * 0x100000001ULL + 1; }

TEST(LinkRendezvousTest, ThreeStagesFindEachOtherInAnyOrder) {
  const uint64_t key = FreshKey();
  std::vector<absl::StatusOr<Neighbours>> got;
  for (int s = 0; s < 3; ++s) got.emplace_back(absl::UnknownError(""));
  std::vector<std::thread> threads;
  // The last stage starts first: it waits for its predecessor.
  for (int stage : {2, 0, 1}) {
    threads.emplace_back([&, stage] {
      PipelinePlace place = *PipelinePlace::FromRank(3 + stage, 6, 3);
      got[stage] =
          ConnectNeighbours(place, key, absl::Seconds(60), absl::Seconds(60));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(got[s].ok()) << got[s].status();
  EXPECT_EQ(got[0]->previous, nullptr);
  EXPECT_EQ(got[2]->next, nullptr);
  EXPECT_EQ(got[0]->next->peer().stage, 1);
  EXPECT_EQ(got[0]->next->peer().rank, 4);
  EXPECT_EQ(got[2]->previous->peer().rank, 4);
  // The links carry messages between the right pair.
  const Tag tag{0, 0, Direction::kActivations};
  PS_ASSERT_OK(got[1]->next->Send(tag, 1, 0, {42}));
  std::vector<float> v(1);
  PS_ASSERT_OK(got[2]->previous->Receive(tag, 1, absl::MakeSpan(v)).status());
  EXPECT_EQ(v[0], 42);
}

TEST(LinkRendezvousTest, ALinkOfAnotherReplicaOrJobIsNotTaken) {
  const uint64_t key = FreshKey();
  // Stage 1 of replica 1 looks for replica 1's stage 0; only replica 0's
  // runs, so it gives up naming its missing neighbour.
  std::thread first([&] {
    PipelinePlace place = *PipelinePlace::FromRank(0, 4, 2);
    (void)ConnectNeighbours(place, key, absl::Seconds(2), absl::Seconds(2));
  });
  PipelinePlace place = *PipelinePlace::FromRank(3, 4, 2);
  absl::StatusOr<Neighbours> n =
      ConnectNeighbours(place, key, absl::Seconds(1), absl::Seconds(1));
  first.join();
  ASSERT_EQ(n.status().code(), absl::StatusCode::kDeadlineExceeded)
      << n.status();
  EXPECT_NE(n.status().message().find("stage 0 (rank 2)"), std::string::npos)
      << n.status();
}

TEST(LinkRendezvousTest, AStrangerIsNotAdmittedAndTheNextStageStillIs) {
  const uint64_t key = FreshKey();
  absl::StatusOr<Neighbours> upstream = absl::UnknownError("");
  std::thread first([&] {
    upstream = ConnectNeighbours(*PipelinePlace::FromRank(0, 2, 2), key,
                                 absl::Seconds(60), absl::Seconds(60));
  });
  // A stranger connects first and says nothing useful.
  std::unique_ptr<LocalSocket> stranger;
  while (stranger == nullptr) {
    absl::StatusOr<std::unique_ptr<LocalSocket>> s =
        LocalSocket::Connect(LinkSocketName(key, 0, 0));
    if (s.ok()) stranger = *std::move(s);
  }
  stranger->Queue(FrameType::kHello, "who knows");
  PS_ASSERT_OK(stranger->Flush());
  absl::StatusOr<Neighbours> downstream =
      ConnectNeighbours(*PipelinePlace::FromRank(1, 2, 2), key,
                        absl::Seconds(60), absl::Seconds(60));
  first.join();
  ASSERT_TRUE(upstream.ok()) << upstream.status();
  ASSERT_TRUE(downstream.ok()) << downstream.status();
  EXPECT_EQ(upstream->next->peer().rank, 1);
}

TEST(LinkRendezvousTest, JobsHaveDistinctKeys) {
  EXPECT_NE(JobKey("a", "h:1"), JobKey("b", "h:1"));
  EXPECT_NE(JobKey("a", "h:1"), JobKey("a", "h:2"));
  EXPECT_NE(LinkSocketName(1, 0, 1), LinkSocketName(1, 1, 0));
}

}  // namespace
}  // namespace ps::worker::pipeline
