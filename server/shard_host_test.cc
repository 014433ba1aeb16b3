#include "server/shard_host.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_config.h"
#include "server/server_config_testing.h"
#include "server/shard_builder.h"
#include "update/checkpoint.h"

namespace ps::server {
namespace {

using ::testing::HasSubstr;

ModelSpec OneTensor(InitializerSpec init = InitializerSpec::Constant(1)) {
  ModelSpec m;
  m.tensors.push_back({"w", DType::kFloat32, {8}, init});
  return m;
}

class ShardHostTest : public ::testing::Test {
 protected:
  ShardHostTest() : config_(testing::TestServerConfig(2)) {}

  // Shards keep checkpoints in a fresh directory, which it returns.
  std::string KeepCheckpoints() {
    config_.checkpoints = testing::ManualCheckpoints();
    return config_.checkpoints->dir;
  }

  ServerConfig config_;
  ShardBuilder builder_{config_, nullptr};
};

TEST_F(ShardHostTest, RankZerosDeclarationBuildsTheShardOthersWait) {
  ShardHost host(builder_.ForDeclarations(), DeclarationLimits());
  EXPECT_EQ(host.get(), nullptr);
  EXPECT_EQ(host.Declare(1, OneTensor()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(host.get(), nullptr);
  absl::StatusOr<DeclaredShard*> shard = host.Declare(0, OneTensor());
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(host.get(), *shard);
  EXPECT_EQ((*shard)->declared_by, "rank 0");
  // Every rank that declares the same model gets the same shard.
  EXPECT_EQ(host.Declare(1, OneTensor()).value_or(nullptr), *shard);
}

TEST_F(ShardHostTest, RefusesADeclarationThatDiffersFromTheShards) {
  ShardHost host(builder_.ForDeclarations(), DeclarationLimits());
  ASSERT_TRUE(host.Declare(0, OneTensor()).ok());
  ModelSpec other = OneTensor();
  other.tensors[0].shape = {9};
  const absl::Status s = host.Declare(1, other).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 0"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1"));
}

TEST_F(ShardHostTest, RefusesADeclarationOverTheLimits) {
  DeclarationLimits limits;
  limits.max_model_bytes = 16;
  ShardHost host(builder_.ForDeclarations(), limits);
  EXPECT_EQ(host.Declare(0, OneTensor()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(host.get(), nullptr);
}

TEST_F(ShardHostTest, ABuildThatFailsLeavesNoShard) {
  ShardHost host(
      [](const ModelSpec&) -> absl::StatusOr<std::unique_ptr<DeclaredShard>> {
        return absl::FailedPreconditionError("optimizer differs");
      },
      DeclarationLimits());
  EXPECT_EQ(host.Declare(0, OneTensor()).status(),
            absl::FailedPreconditionError("optimizer differs"));
  EXPECT_EQ(host.get(), nullptr);
}

TEST_F(ShardHostTest, RequireNamesWhatNeedsTheModel) {
  ShardHost host(builder_.ForDeclarations(), DeclarationLimits());
  const absl::Status s = host.Require("a pull").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("a pull before any model was declared"));
  absl::StatusOr<std::unique_ptr<DeclaredShard>> built =
      builder_.FromDeclaration(OneTensor());
  ASSERT_TRUE(built.ok()) << built.status();
  DeclaredShard* installed = built->get();
  host.Install(*std::move(built));
  EXPECT_EQ(host.Require("a pull").value_or(nullptr), installed);
}

TEST_F(ShardHostTest, StopWritesTheFinalCheckpointAndRefusesLaterCalls) {
  const std::string dir = KeepCheckpoints();
  ShardHost host(builder_.ForDeclarations(), DeclarationLimits());
  host.StopAndCheckpoint();  // Nothing to stop yet.
  absl::StatusOr<DeclaredShard*> shard = host.Declare(0, OneTensor());
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_TRUE((*shard)->coordinator->Register(0, 5, 0).ok());
  EXPECT_TRUE(update::ListCheckpoints(dir, 0)->empty());
  host.StopAndCheckpoint();
  EXPECT_EQ(*update::ListCheckpoints(dir, 0),
            std::vector<std::string>{
                absl::StrCat(dir, "/", update::CheckpointFileName(0, 0))});
  EXPECT_FALSE((*shard)->coordinator->Heartbeat(0, 5).ok());
}

TEST_F(ShardHostTest, AShardWaitingForRankZerosValuesKeepsNoCheckpoint) {
  const std::string dir = KeepCheckpoints();
  ShardHost host(builder_.ForDeclarations(), DeclarationLimits());
  ASSERT_TRUE(host.Declare(0, OneTensor(InitializerSpec::FromRank0())).ok());
  ASSERT_TRUE(host.get()->store->awaiting_initial_values());
  host.StopAndCheckpoint();
  EXPECT_TRUE(update::ListCheckpoints(dir, 0)->empty());
}

}  // namespace
}  // namespace ps::server
