#include "worker/pipeline/link_rendezvous.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/local_socket.h"
#include "common/tcp_frames.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"

namespace ps::worker::pipeline {
namespace {

uint64_t FreshKey() { return std::random_device()() * 0x100000001ULL + 1; }

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

// A free port of this host's loopback, reserved and let go as the launcher
// does.
std::string FreeLoopbackAddress() {
  absl::StatusOr<TcpFrameListener> reserved = ListenTcpFrames("127.0.0.1", 0);
  EXPECT_TRUE(reserved.ok()) << reserved.status();
  return reserved.ok() ? absl::StrCat("127.0.0.1:", reserved->port) : "";
}

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

TEST(LinkRendezvousTest, StagesOnTwoHostsLinkOverTcpBesideTheSocket) {
  // Stages 0 and 1 share a host (the Unix socket); stage 2 is "elsewhere":
  // stage 1 listens over TCP for it.
  const uint64_t key = FreshKey();
  const std::string address = FreeLoopbackAddress();
  std::vector<absl::StatusOr<Neighbours>> got;
  for (int s = 0; s < 3; ++s) got.emplace_back(absl::UnknownError(""));
  std::vector<LinkRoutes> routes(3);
  routes[1] = {address, "", kSecret};
  routes[2] = {"", address, kSecret};
  std::vector<std::thread> threads;
  for (int stage : {2, 1, 0}) {
    threads.emplace_back([&, stage] {
      got[stage] = ConnectNeighbours(*PipelinePlace::FromRank(stage, 3, 3), key,
                                     absl::Seconds(60), absl::Seconds(60),
                                     routes[stage]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(got[s].ok()) << got[s].status();
  EXPECT_EQ(got[2]->previous->peer().stage, 1);
  // Both directions, with a payload of several frames' worth.
  std::vector<float> sent(100000);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = 0.5f * i;
  const Tag forward{7, 1, Direction::kActivations};
  PS_ASSERT_OK(got[1]->next->Send(forward, 4, 0, sent));
  std::vector<float> received(sent.size());
  PS_ASSERT_OK(
      got[2]->previous->Receive(forward, 4, absl::MakeSpan(received)).status());
  EXPECT_EQ(received, sent);
  const Tag back{7, 1, Direction::kGradients};
  PS_ASSERT_OK(got[2]->previous->Send(back, 1, 2.5f, {3}));
  std::vector<float> gradient(1);
  absl::StatusOr<float> loss =
      got[1]->next->Receive(back, 1, absl::MakeSpan(gradient));
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(*loss, 2.5f);
  EXPECT_EQ(gradient[0], 3);
}

TEST(LinkRendezvousTest, AStageWithAnotherSecretIsRefusedAtOnceSayingWhy) {
  const uint64_t key = FreshKey();
  const std::string address = FreeLoopbackAddress();
  absl::StatusOr<Neighbours> upstream = absl::UnknownError("");
  std::thread first([&] {
    upstream = ConnectNeighbours(*PipelinePlace::FromRank(0, 2, 2), key,
                                 absl::Seconds(5), absl::Seconds(5),
                                 {address, "", kSecret});
  });
  absl::StatusOr<Neighbours> downstream = ConnectNeighbours(
      *PipelinePlace::FromRank(1, 2, 2), key, absl::Seconds(60),
      absl::Seconds(60), {"", address, "fedcba9876543210fedcba9876543210"});
  first.join();
  // Refused, not timed out after its 60 s.
  ASSERT_EQ(downstream.status().code(), absl::StatusCode::kPermissionDenied)
      << downstream.status();
  EXPECT_NE(downstream.status().message().find("stage link secret"),
            std::string::npos)
      << downstream.status();
  // And the listener, never joined, gave up naming the TCP address.
  ASSERT_EQ(upstream.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(upstream.status().message().find(address), std::string::npos)
      << upstream.status();
}

TEST(LinkRendezvousTest, JobsHaveDistinctKeys) {
  EXPECT_NE(JobKey("a", "h:1"), JobKey("b", "h:1"));
  EXPECT_NE(JobKey("a", "h:1"), JobKey("a", "h:2"));
  EXPECT_NE(LinkSocketName(1, 0, 1), LinkSocketName(1, 1, 0));
}

}  // namespace
}  // namespace ps::worker::pipeline
