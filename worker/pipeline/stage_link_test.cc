#include "worker/pipeline/stage_link.h"

#include <sys/socket.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/local_socket.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"

namespace ps::worker::pipeline {
namespace {

// Two ends of one link, stage 0 (rank 2) and stage 1 (rank 3).
struct Pair {
  std::unique_ptr<StageLink> upstream;
  std::unique_ptr<StageLink> downstream;
};

Pair MakePair() {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  Pair p;
  p.upstream = std::make_unique<StageLink>(
      std::make_unique<LocalSocket>(fds[0]), LinkPeer{1, 3});
  p.downstream = std::make_unique<StageLink>(
      std::make_unique<LocalSocket>(fds[1]), LinkPeer{0, 2});
  return p;
}

TEST(StageLinkTest, CarriesActivationsForwardAndGradientsBack) {
  Pair p = MakePair();
  const Tag forward{7, 2, Direction::kActivations};
  PS_ASSERT_OK(p.upstream->Send(forward, 2, 0, {1, 2, 3, 4, 5, 6}));
  std::vector<float> got(6);
  PS_ASSERT_OK_AND_ASSIGN(
      float loss, p.downstream->Receive(forward, 2, absl::MakeSpan(got)));
  EXPECT_EQ(loss, 0);
  EXPECT_EQ(got, (std::vector<float>{1, 2, 3, 4, 5, 6}));

  const Tag back{7, 2, Direction::kGradients};
  PS_ASSERT_OK(p.downstream->Send(back, 2, 1.25f, {-1, -2, -3, -4, -5, -6}));
  PS_ASSERT_OK_AND_ASSIGN(loss,
                          p.upstream->Receive(back, 2, absl::MakeSpan(got)));
  EXPECT_EQ(loss, 1.25f);
  EXPECT_EQ(got, (std::vector<float>{-1, -2, -3, -4, -5, -6}));
}

TEST(StageLinkTest, RefusesAMessageOfAnotherStepMicroBatchOrDirection) {
  for (const Tag& sent :
       {Tag{8, 2, Direction::kActivations}, Tag{7, 3, Direction::kActivations},
        Tag{7, 2, Direction::kGradients}}) {
    Pair p = MakePair();
    PS_ASSERT_OK(p.upstream->Send(sent, 1, 0, {1, 2}));
    std::vector<float> got(2);
    absl::StatusOr<float> r = p.downstream->Receive(
        Tag{7, 2, Direction::kActivations}, 1, absl::MakeSpan(got));
    ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
    EXPECT_NE(r.status().message().find(sent.ToString()), std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("stage 0 (rank 2)"), std::string::npos)
        << r.status();
  }
}

TEST(StageLinkTest, RefusesAnotherShape) {
  Pair p = MakePair();
  const Tag tag{1, 0, Direction::kActivations};
  PS_ASSERT_OK(p.upstream->Send(tag, 2, 0, {1, 2, 3, 4}));
  std::vector<float> got(3);
  EXPECT_EQ(p.downstream->Receive(tag, 1, absl::MakeSpan(got)).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(StageLinkTest, ADeadNeighbourIsAnAbortNamingIt) {
  Pair p = MakePair();
  p.downstream.reset();  // Closes its socket, as its death would.
  std::vector<float> got(2);
  absl::StatusOr<float> r = p.upstream->Receive(
      Tag{3, 0, Direction::kGradients}, 1, absl::MakeSpan(got));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kAborted) << r.status();
  EXPECT_NE(r.status().message().find("stage 1 (rank 3)"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("died"), std::string::npos);
}

}  // namespace
}  // namespace ps::worker::pipeline
