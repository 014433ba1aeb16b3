#include "server/collective_combine.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/collective_testing.h"

namespace ps::server {
namespace {

CollectiveCall Reduce(CollectiveOp op, std::vector<float> values) {
  CollectiveCall call;
  call.kind = CollectiveKind::kAllreduce;
  call.op = op;
  call.name = "x";
  call.shape = {static_cast<int64_t>(values.size())};
  call.num_elements = values.size();
  call.data = Bytes(values);
  return call;
}

TEST(CollectiveCombineTest, ReducesInRankOrder) {
  const std::vector<std::vector<float>> in = {
      {1.0f, -2.0f, 1e8f}, {0.5f, 3.0f, 1.0f}, {-4.0f, 0.25f, -1e8f}};
  for (CollectiveOp op : {CollectiveOp::kSum, CollectiveOp::kAverage,
                          CollectiveOp::kMin, CollectiveOp::kMax}) {
    std::vector<CollectiveCall> calls;
    for (const auto& v : in) calls.push_back(Reduce(op, v));
    std::vector<const CollectiveCall*> by_rank;
    for (const auto& c : calls) by_rank.push_back(&c);
    absl::StatusOr<CollectiveResult> result = Combine(by_rank);
    ASSERT_TRUE(result.ok()) << result.status();
    std::vector<float> expected = in[0];
    for (size_t r = 1; r < in.size(); ++r) {
      for (size_t i = 0; i < expected.size(); ++i) {
        float& e = expected[i];
        const float v = in[r][i];
        if (op == CollectiveOp::kMin) e = v < e ? v : e;
        if (op == CollectiveOp::kMax) e = v > e ? v : e;
        if (op == CollectiveOp::kSum || op == CollectiveOp::kAverage) e += v;
      }
    }
    if (op == CollectiveOp::kAverage) {
      for (float& e : expected) e /= 3.0f;
    }
    EXPECT_EQ(Floats(result->data), expected);
  }
}

TEST(CollectiveCombineTest, AJoinedRankAddsNothingButCountsInTheAverage) {
  CollectiveCall a = Reduce(CollectiveOp::kAverage, {3.0f});
  CollectiveCall b = Reduce(CollectiveOp::kAverage, {6.0f});
  std::vector<const CollectiveCall*> by_rank = {&a, nullptr, &b};
  absl::StatusOr<CollectiveResult> result = Combine(by_rank);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(Floats(result->data), std::vector<float>{3.0f});
}

TEST(CollectiveCombineTest, AllgatherConcatenatesRowsOfDifferentCounts) {
  CollectiveCall a;
  a.kind = CollectiveKind::kAllgather;
  a.name = "g";
  a.shape = {1, 2};
  a.num_elements = 2;
  a.data = Bytes({1, 2});
  CollectiveCall b = a;
  b.shape = {2, 2};
  b.num_elements = 4;
  b.data = Bytes({3, 4, 5, 6});
  ASSERT_TRUE(CheckCall(b, 2).ok());
  std::vector<const CollectiveCall*> by_rank = {&a, &b};
  absl::StatusOr<CollectiveResult> result = Combine(by_rank);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(Floats(result->data), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(result->first_dims, (std::vector<int64_t>{1, 2}));
}

TEST(CollectiveCombineTest, BroadcastTakesTheRootsValues) {
  CollectiveCall root;
  root.kind = CollectiveKind::kBroadcast;
  root.name = "w";
  root.root_rank = 1;
  root.shape = {2};
  root.num_elements = 2;
  root.data = Bytes({7, 8});
  CollectiveCall other = root;
  other.data.clear();
  std::vector<const CollectiveCall*> by_rank = {&other, &root, &other};
  absl::StatusOr<CollectiveResult> result = Combine(by_rank);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(Floats(result->data), (std::vector<float>{7, 8}));

  std::vector<const CollectiveCall*> root_joined = {&other, nullptr};
  EXPECT_NE(Combine(root_joined)
                .status()
                .message()
                .find("root rank 1 has "
                      "joined"),
            std::string::npos);
}

TEST(CollectiveCombineTest, RefusesCallsThatDisagreeNamingTheRank) {
  CollectiveCall a = Reduce(CollectiveOp::kSum, {1, 2, 3});
  CollectiveCall b = Reduce(CollectiveOp::kSum, {1, 2, 3, 4});
  std::vector<const CollectiveCall*> by_rank = {&a, &a, &b};
  absl::Status s = Combine(by_rank).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("rank 2 sends shape [4], not [3] (rank 0)"),
            std::string::npos)
      << s;

  CollectiveCall c = Reduce(CollectiveOp::kMax, {1, 2, 3});
  by_rank = {&a, &c};
  EXPECT_NE(Combine(by_rank).status().message().find("op max, not sum"),
            std::string::npos);
}

TEST(CollectiveCombineTest, CheckCallRefusesWhatNoRankCouldAgreeOn) {
  CollectiveCall root;
  root.kind = CollectiveKind::kBroadcastBytes;
  root.float32 = false;
  root.name = "o";
  root.root_rank = 3;
  EXPECT_NE(CheckCall(root, 3).message().find("unknown root rank 3"),
            std::string::npos);
  root.root_rank = 2;
  EXPECT_TRUE(CheckCall(root, 3).ok());

  CollectiveCall short_data = Reduce(CollectiveOp::kSum, {1, 2});
  short_data.data.resize(4);
  EXPECT_EQ(CheckCall(short_data, 2).code(),
            absl::StatusCode::kInvalidArgument);
  CollectiveCall outside = Reduce(CollectiveOp::kSum, {1, 2});
  outside.offset = 1;
  EXPECT_EQ(CheckCall(outside, 2).code(), absl::StatusCode::kInvalidArgument);
  CollectiveCall no_op = Reduce(CollectiveOp::kNone, {1});
  EXPECT_EQ(CheckCall(no_op, 2).code(), absl::StatusCode::kInvalidArgument);
  CollectiveCall scalar_gather;
  scalar_gather.kind = CollectiveKind::kAllgather;
  scalar_gather.num_elements = 1;
  scalar_gather.data = Bytes({1});
  EXPECT_EQ(CheckCall(scalar_gather, 2).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CollectiveCombineTest, SpecDifferenceIgnoresAnAllgathersFirstDimension) {
  CollectiveCall a;
  a.kind = CollectiveKind::kAllgather;
  a.shape = {1, 3};
  CollectiveCall b = a;
  b.shape = {5, 3};
  EXPECT_EQ(SpecDifference(a, b), "");
  b.shape = {5, 4};
  EXPECT_EQ(SpecDifference(a, b), "shape [1,3] then [5,4]");
  EXPECT_EQ(SpecDifference(Reduce(CollectiveOp::kSum, {1}),
                           Reduce(CollectiveOp::kSum, {1, 2})),
            "shape [1] then [2]");
}

}  // namespace
}  // namespace ps::server
