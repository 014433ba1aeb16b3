#include "allreduce/join_ring.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allreduce/ring_testing.h"
#include "gtest/gtest.h"

namespace ps::allreduce {
namespace {

class JoinRingTest : public ::testing::Test {
 protected:
  RingOptions Options(int rank) const {
    RingOptions options;
    options.coordinator = coordinator_.address();
    options.rank = rank;
    options.num_workers = 2;
    options.job_id = "job";
    options.hostname = "127.0.0.1";
    return options;
  }

  // Both ranks join and sum {rank + 1, ...}; returns the rounds.
  std::vector<uint64_t> JoinAndSum() {
    std::vector<uint64_t> rounds(2);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        absl::StatusOr<JoinedRing> ring = JoinRing(Options(rank));
        ASSERT_TRUE(ring.ok()) << ring.status();
        rounds[rank] = ring->round;
        std::vector<float> data(100, rank + 1.0f);
        ASSERT_TRUE(ring->group->AllreduceSum(absl::MakeSpan(data), 0).ok());
        EXPECT_EQ(data, std::vector<float>(100, 3.0f));
      });
    }
    for (std::thread& t : threads) t.join();
    return rounds;
  }

  InProcessCoordinator coordinator_{2, "job"};
};

TEST_F(JoinRingTest, TwoWorkersFormARingThroughTheCoordinator) {
  EXPECT_EQ(JoinAndSum(), (std::vector<uint64_t>{0, 0}));
}

TEST_F(JoinRingTest, JoiningAgainFormsANewRingWithFreshKeys) {
  JoinAndSum();
  EXPECT_EQ(JoinAndSum(), (std::vector<uint64_t>{1, 1}));
}

TEST_F(JoinRingTest, AnotherJobIsRefused) {
  RingOptions options = Options(0);
  options.job_id = "other";
  absl::StatusOr<JoinedRing> ring = JoinRing(options);
  EXPECT_TRUE(absl::IsFailedPrecondition(ring.status())) << ring.status();
}

}  // namespace
}  // namespace ps::allreduce
