#include "allreduce/gloo_group.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "allreduce/compression.h"
#include "allreduce/ring_testing.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace ps::allreduce {
namespace {

// Magnitudes that differ by many binades, so that the order of the sums
// changes the bits.
std::vector<float> RankData(int rank, size_t n) {
  return SpreadValues(rank + 7, n, -20, 20);
}

// Values from binary16's subnormal range up to 64, so that 4 ranks' sums
// stay finite in binary16.
std::vector<float> HalfRangeData(int rank, size_t n) {
  return SpreadValues(rank + 11, n, -28, 6);
}

// fp16 buckets against the exact sum (float64 of the float inputs): within
// Fp16SumBound everywhere, the same bits on every rank and on a rerun, and
// coarser than float32 (else the test would not see the compression).
TEST(GlooGroupTest, Fp16BucketsStayWithinTheBoundAndRepeat) {
  constexpr int kRanks = 4;
  constexpr size_t kElements = 20000;
  std::vector<double> exact(kElements, 0.0), abs_sum(kElements, 0.0);
  for (int rank = 0; rank < kRanks; ++rank) {
    const std::vector<float> data = HalfRangeData(rank, kElements);
    for (size_t i = 0; i < kElements; ++i) {
      exact[i] += data[i];
      abs_sum[i] += std::fabs(data[i]);
    }
  }
  std::vector<std::vector<float>> runs[2];
  for (auto& results : runs) {
    results.resize(kRanks);
    RunRingInThreads(kRanks, [&](GlooGroup& group) {
      std::vector<float> data = HalfRangeData(group.rank(), kElements);
      ASSERT_TRUE(
          group.ReduceBucket(absl::MakeSpan(data), Compression::kFp16, 5).ok());
      results[group.rank()] = data;
    });
  }
  double worst_ratio = 0;
  size_t inexact = 0;
  for (size_t i = 0; i < kElements; ++i) {
    const double error = std::fabs(runs[0][0][i] - exact[i]);
    const double bound = Fp16SumBound(abs_sum[i], kRanks);
    ASSERT_LE(error, bound) << i << ": " << runs[0][0][i] << " vs " << exact[i];
    worst_ratio = std::max(worst_ratio, error / bound);
    if (runs[0][0][i] != static_cast<float>(exact[i])) ++inexact;
  }
  EXPECT_GT(inexact, kElements / 2) << "fp16 should round most sums";
  RecordProperty("worst_error_over_bound", std::to_string(worst_ratio));
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_EQ(runs[0][rank], runs[0][0]) << rank;
    EXPECT_EQ(runs[1][rank], runs[0][rank]) << rank;
  }
}

TEST(GlooGroupTest, Fp16OnOneRankIsTheRoundingAlone) {
  RunRingInThreads(1, [&](GlooGroup& group) {
    std::vector<float> data = HalfRangeData(0, 1000);
    const std::vector<float> original = data;
    ASSERT_TRUE(
        group.ReduceBucket(absl::MakeSpan(data), Compression::kFp16, 0).ok());
    for (size_t i = 0; i < data.size(); ++i) {
      ASSERT_EQ(data[i], HalfToFloat(FloatToHalf(original[i]))) << i;
    }
  });
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
