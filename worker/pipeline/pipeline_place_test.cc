#include "worker/pipeline/pipeline_place.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"

namespace ps::worker::pipeline {
namespace {

TEST(PipelinePlaceTest, AReplicasStagesAreConsecutiveRanks) {
  for (int rank = 0; rank < 6; ++rank) {
    PS_ASSERT_OK_AND_ASSIGN(PipelinePlace p,
                            PipelinePlace::FromRank(rank, 6, 3));
    EXPECT_EQ(p.stages, 3);
    EXPECT_EQ(p.replicas, 2);
    EXPECT_EQ(p.stage, rank % 3);
    EXPECT_EQ(p.replica, rank / 3);
    EXPECT_EQ(p.rank(), rank);
    EXPECT_EQ(p.RankOf(0), 3 * p.replica);
    EXPECT_EQ(p.first(), rank % 3 == 0);
    EXPECT_EQ(p.last(), rank % 3 == 2);
  }
}

TEST(PipelinePlaceTest, RefusesACountNotDivisibleNamingBothFlags) {
  absl::StatusOr<PipelinePlace> p = PipelinePlace::FromRank(0, 5, 2);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("--num_workers=5"), std::string::npos);
  EXPECT_NE(p.status().message().find("--pipeline_stages=2"),
            std::string::npos);
  EXPECT_FALSE(PipelinePlace::FromRank(0, 4, 0).ok());
  EXPECT_FALSE(PipelinePlace::FromRank(4, 4, 2).ok());
}

TEST(PipelinePlaceTest, EachStageHasAGroupOfItsOwn) {
  EXPECT_EQ(StageGroupJobId("run-3fa2", 1), "run-3fa2-stage1");
  EXPECT_EQ(StageGroupJobId("", 1), "");
  const std::vector<std::string> servers = {"a:1", "a:2", "b:1", "b:2"};
  PS_ASSERT_OK_AND_ASSIGN(std::vector<std::string> first,
                          StageGroupServers(servers, 2, 0));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<std::string> second,
                          StageGroupServers(servers, 2, 1));
  EXPECT_EQ(first, (std::vector<std::string>{"a:1", "a:2"}));
  EXPECT_EQ(second, (std::vector<std::string>{"b:1", "b:2"}));
}

TEST(PipelinePlaceTest, RefusesServersThatAreNotEqualGroups) {
  absl::StatusOr<std::vector<std::string>> s =
      StageGroupServers({"a:1", "a:2", "a:3"}, 2, 0);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--servers"), std::string::npos);
  EXPECT_FALSE(StageGroupServers({"a:1", "a:2"}, 2, 2).ok());
}

}  // namespace
}  // namespace ps::worker::pipeline
