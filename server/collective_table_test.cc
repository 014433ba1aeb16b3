#include "server/collective_table.h"

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/collective_testing.h"

namespace ps::server {
namespace {

CollectiveCall Sum(std::string name, uint64_t sequence,
                   std::vector<float> values) {
  CollectiveCall call;
  call.kind = CollectiveKind::kAllreduce;
  call.op = CollectiveOp::kSum;
  call.name = std::move(name);
  call.sequence = sequence;
  call.shape = {static_cast<int64_t>(values.size())};
  call.num_elements = values.size();
  call.data = Bytes(values);
  return call;
}

CollectiveCall Join(uint64_t generation) {
  CollectiveCall call;
  call.kind = CollectiveKind::kJoin;
  call.generation = generation;
  return call;
}

bool Never() { return false; }

using Answer = absl::StatusOr<std::shared_ptr<const CollectiveResult>>;

// Runs `calls[r]` as rank r, each on its own thread; the answers by rank.
std::vector<Answer> RunAll(CollectiveTable& table,
                           std::vector<CollectiveCall> calls) {
  std::vector<Answer> answers(calls.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t r = 0; r < calls.size(); ++r) {
    threads.emplace_back([&, r] {
      answers[r] = table.Run(static_cast<int>(r), std::move(calls[r]), Never);
    });
  }
  for (auto& t : threads) t.join();
  return answers;
}

TEST(CollectiveTableTest, EveryRankGetsTheSumOfAllRanks) {
  CollectiveTable table(3);
  std::vector<Answer> answers = RunAll(
      table,
      {Sum("x", 1, {1, 2}), Sum("x", 1, {10, 20}), Sum("x", 1, {100, 200})});
  for (const Answer& a : answers) {
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(Floats((*a)->data), (std::vector<float>{111, 222}));
  }
}

TEST(CollectiveTableTest, SequencesOfOneNameAreSeparateOperations) {
  CollectiveTable table(2);
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    const float s = static_cast<float>(seq);
    std::vector<Answer> answers =
        RunAll(table, {Sum("x", seq, {s}), Sum("x", seq, {s * 10})});
    for (const Answer& a : answers) {
      ASSERT_TRUE(a.ok()) << a.status();
      EXPECT_EQ(Floats((*a)->data), std::vector<float>{s * 11});
    }
  }
}

TEST(CollectiveTableTest, ARepeatedCallGetsTheSameResultNotASecondShare) {
  CollectiveTable table(2);
  RunAll(table, {Sum("x", 1, {1}), Sum("x", 1, {2})});
  // Rank 1 restarted and repeats its call with other values.
  Answer again = table.Run(1, Sum("x", 1, {50}), Never);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Floats((*again)->data), std::vector<float>{3});
}

TEST(CollectiveTableTest, ARepeatWhileWaitingDoesNotContributeTwice) {
  CollectiveTable table(2);
  std::atomic<bool> gone{false};
  std::thread first([&] {
    Answer a = table.Run(0, Sum("x", 1, {1}), [&] { return gone.load(); });
    EXPECT_EQ(a.status().code(), absl::StatusCode::kCancelled);
  });
  gone = true;  // Rank 0's process died while waiting.
  first.join();
  std::vector<Answer> answers =
      RunAll(table, {Sum("x", 1, {1000}), Sum("x", 1, {2})});
  for (const Answer& a : answers) {
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(Floats((*a)->data), std::vector<float>{3});
  }
}

TEST(CollectiveTableTest, ARepeatEvictedFromTheCacheIsRefused) {
  CollectiveTable table(1, /*cache_bytes=*/200);
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    ASSERT_TRUE(table.Run(0, Sum("x", seq, {1, 2, 3, 4}), Never).ok());
  }
  absl::Status s = table.Run(0, Sum("x", 1, {1, 2, 3, 4}), Never).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("no longer cached"), std::string::npos) << s;
}

TEST(CollectiveTableTest, CallsOfANameMayCompleteOutOfOrder) {
  // Calls started together (async) reach the shard in any order.
  CollectiveTable table(1);
  Answer second = table.Run(0, Sum("x", 2, {2}), Never);
  ASSERT_TRUE(second.ok()) << second.status();
  Answer first = table.Run(0, Sum("x", 1, {1}), Never);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Floats((*first)->data), std::vector<float>{1});
}

TEST(CollectiveTableTest, MismatchedShapesFailOnEveryRankNamingTheRank) {
  CollectiveTable table(3);
  std::vector<Answer> answers =
      RunAll(table, {Sum("x", 1, {1}), Sum("x", 1, {1}), Sum("x", 1, {1, 2})});
  for (const Answer& a : answers) {
    EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(a.status().message().find("rank 2 sends shape [2], not [1]"),
              std::string::npos)
        << a.status();
  }
}

TEST(CollectiveTableTest, AnInvalidCallFailsTheOperationOnEveryRank) {
  CollectiveTable table(2);
  CollectiveCall bad = Sum("x", 1, {1, 2});
  bad.data.resize(4);
  std::vector<Answer> answers = RunAll(table, {Sum("x", 1, {1, 2}), bad});
  for (const Answer& a : answers) {
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(a.status().message().find("rank 1"), std::string::npos)
        << a.status();
  }
}

TEST(CollectiveTableTest, ANameReusedWithAnotherShapeIsRefused) {
  CollectiveTable table(2);
  RunAll(table, {Sum("x", 1, {1}), Sum("x", 1, {2})});
  std::vector<Answer> answers =
      RunAll(table, {Sum("x", 2, {1, 2}), Sum("x", 2, {3, 4})});
  for (const Answer& a : answers) {
    EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(a.status().message().find("shape [1] then [2]"),
              std::string::npos)
        << a.status();
  }
  // Anonymous calls of one default name may change shape.
  CollectiveCall a = Sum("allreduce.noname", 1, {1});
  a.anonymous = true;
  CollectiveCall b = Sum("allreduce.noname", 2, {1, 2});
  b.anonymous = true;
  CollectiveCall a1 = a, b1 = b;
  EXPECT_TRUE(RunAll(table, {a, a1})[0].ok());
  EXPECT_TRUE(RunAll(table, {b, b1})[0].ok());
}

TEST(CollectiveTableTest, JoinedRanksLetTheOthersGoOnAndJoinNamesTheLast) {
  CollectiveTable table(3);
  Answer join0 = absl::UnknownError("");
  std::thread early([&] { join0 = table.Run(0, Join(0), Never); });
  // Rank 0 is out of data: ranks 1 and 2 still reduce, rank 0 adds nothing.
  std::vector<Answer> answers(3, absl::UnknownError(""));
  std::thread r1([&] { answers[1] = table.Run(1, Sum("x", 1, {2}), Never); });
  answers[2] = table.Run(2, Sum("x", 1, {5}), Never);
  r1.join();
  for (int r : {1, 2}) {
    ASSERT_TRUE(answers[r].ok()) << answers[r].status();
    EXPECT_EQ(Floats((*answers[r])->data), std::vector<float>{7});
  }
  std::thread late1([&] { answers[1] = table.Run(1, Join(0), Never); });
  answers[2] = table.Run(2, Join(0), Never);
  late1.join();
  early.join();
  for (const Answer& a : {join0, answers[1], answers[2]}) {
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_GE((*a)->last_rank, 1);
    EXPECT_EQ((*a)->last_rank, (*join0)->last_rank);
  }
  // Generation 1 waits for every rank again.
  std::vector<CollectiveCall> calls(3, Sum("x", 1, {1}));
  for (auto& c : calls) c.generation = 1;
  for (const Answer& a : RunAll(table, calls)) {
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(Floats((*a)->data), std::vector<float>{3});
  }
}

}  // namespace
}  // namespace ps::server
