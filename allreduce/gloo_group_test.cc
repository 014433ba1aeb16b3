#include "allreduce/gloo_group.h"

#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "allreduce/ring_testing.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace ps::allreduce {
namespace {

std::vector<float> RankData(int rank, size_t n) {
  std::mt19937 random(rank + 7);
  // Magnitudes that differ by many binades, so that the order of the sums
  // changes the bits.
  std::uniform_real_distribution<float> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> data(n);
  for (float& x : data) x = std::ldexp(mantissa(random), exponent(random));
  return data;
}

TEST(GlooGroupTest, SumsEveryElementOverTheRanks) {
  constexpr int kRanks = 3;
  constexpr size_t kElements = 1000;
  std::vector<std::vector<float>> results(kRanks);
  RunRingInThreads(kRanks, [&](GlooGroup& group) {
    std::vector<float> data(kElements);
    for (size_t i = 0; i < kElements; ++i) data[i] = group.rank() * 1000 + i;
    ASSERT_TRUE(group.AllreduceSum(absl::MakeSpan(data), 0).ok());
    results[group.rank()] = data;
  });
  for (size_t i = 0; i < kElements; ++i) {
    // 0 + 1000 + 2000 + 3 i: exact in float.
    EXPECT_EQ(results[0][i], 3000.0f + 3 * i) << i;
  }
  EXPECT_EQ(results[1], results[0]);
  EXPECT_EQ(results[2], results[0]);
}

TEST(GlooGroupTest, SameInputsGiveTheSameBitsOnEveryRankAndRun) {
  constexpr int kRanks = 3;
  constexpr size_t kElements = 100000;
  std::vector<std::vector<float>> runs[2];
  for (auto& results : runs) {
    results.resize(kRanks);
    RunRingInThreads(kRanks, [&](GlooGroup& group) {
      std::vector<float> data = RankData(group.rank(), kElements);
      ASSERT_TRUE(group.AllreduceSum(absl::MakeSpan(data), 3).ok());
      results[group.rank()] = data;
    });
  }
  for (int rank = 0; rank < kRanks; ++rank) {
    ASSERT_EQ(runs[0][rank].size(), kElements);
    EXPECT_EQ(std::memcmp(runs[0][rank].data(), runs[1][rank].data(),
                          kElements * sizeof(float)),
              0)
        << "rank " << rank << " differs between runs";
    EXPECT_EQ(std::memcmp(runs[0][rank].data(), runs[0][0].data(),
                          kElements * sizeof(float)),
              0)
        << "rank " << rank << " differs from rank 0";
  }
}

TEST(GlooGroupTest, BroadcastGivesEveryRankTheRootsBytes) {
  constexpr int kRanks = 3;
  std::vector<std::string> results(kRanks);
  RunRingInThreads(kRanks, [&](GlooGroup& group) {
    std::string data(5000, static_cast<char>('a' + group.rank()));
    ASSERT_TRUE(group.Broadcast(absl::MakeSpan(data), 1, 0).ok());
    results[group.rank()] = data;
    EXPECT_TRUE(absl::IsInvalidArgument(
        group.Broadcast(absl::MakeSpan(data), kRanks, 0)));
  });
  for (const std::string& result : results) {
    EXPECT_EQ(result, std::string(5000, 'b'));
  }
}

TEST(GlooGroupTest, FailsWithUnavailableWhenAPeerIsGone) {
  gloo::rendezvous::HashStore store;
  std::unique_ptr<GlooGroup> groups[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      GroupOptions options;
      options.rank = rank;
      options.size = 2;
      options.hostname = "127.0.0.1";
      options.timeout = absl::Seconds(30);
      absl::StatusOr<std::unique_ptr<GlooGroup>> group =
          GlooGroup::Connect(options, store);
      ASSERT_TRUE(group.ok()) << group.status();
      groups[rank] = *std::move(group);
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_NE(groups[1], nullptr);
  groups[1].reset();  // Its sockets close, as a killed process's do.
  std::vector<float> data(1000, 1.0f);
  absl::Status status = groups[0]->AllreduceSum(absl::MakeSpan(data), 0);
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
}

TEST(GlooGroupTest, RejectsARankOutsideTheGroup) {
  gloo::rendezvous::HashStore store;
  GroupOptions options;
  options.rank = 2;
  options.size = 2;
  EXPECT_TRUE(
      absl::IsInvalidArgument(GlooGroup::Connect(options, store).status()));
}

}  // namespace
}  // namespace ps::allreduce
