#include "server/shard_builder.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/metrics_http.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/coordinator_test_util.h"
#include "server/server_config_testing.h"
#include "update/checkpoint.h"

namespace ps::server {
namespace {

using ::testing::HasSubstr;

ModelSpec TwoTensors() {
  ModelSpec m;
  m.tensors.push_back(
      {"w", DType::kFloat32, {3, 4}, InitializerSpec::Constant(0.5f)});
  m.tensors.push_back({"b", DType::kFloat32, {4}, InitializerSpec::Zeros()});
  return m;
}

// The names of a shard's optimizer state vectors ("m", "v": adam).
std::vector<std::string> StateNames(const DeclaredShard& shard) {
  std::vector<std::string> names;
  for (const auto& [name, values] : shard.store->Snapshot(0).state) {
    names.push_back(name);
  }
  return names;
}

class ShardBuilderTest : public ::testing::Test {
 protected:
  ShardBuilderTest() {
    config_ = testing::TestServerConfig(2);
    config_.job_id = "job-1";
  }

  // The shard keeps checkpoints in a fresh directory, which it returns.
  std::string KeepCheckpoints() {
    config_.checkpoints = testing::ManualCheckpoints();
    return config_.checkpoints->dir;
  }

  // A checkpoint of TwoTensors' shard, as at `version`.
  update::ShardCheckpoint SnapshotAt(uint64_t version) {
    ShardBuilder builder(config_, nullptr);
    absl::StatusOr<std::unique_ptr<DeclaredShard>> shard =
        builder.FromDeclaration(TwoTensors());
    EXPECT_TRUE(shard.ok()) << shard.status();
    if (!shard.ok()) return {};
    update::ShardCheckpoint snapshot = (*shard)->coordinator->Snapshot();
    snapshot.version = version;
    return snapshot;
  }

  ServerConfig config_;
};

TEST_F(ShardBuilderTest, BuildsTheShardOfADeclaration) {
  ShardBuilder builder(config_, nullptr);
  absl::StatusOr<std::unique_ptr<DeclaredShard>> shard =
      builder.FromDeclaration(TwoTensors());
  ASSERT_TRUE(shard.ok()) << shard.status();
  const DeclaredShard& s = **shard;
  EXPECT_EQ(s.store->num_slices(), 2);
  EXPECT_EQ(s.store->num_elements(), 16u);
  EXPECT_EQ(s.coordinator->version(), 0u);
  EXPECT_EQ(s.checkpointer, nullptr);
  EXPECT_EQ(s.identity.partition_fingerprint,
            Partition::Create(TwoTensors(), 1)->fingerprint());
  EXPECT_EQ(s.identity.server_index, 0);
  EXPECT_EQ(s.identity.num_workers, 2);
  EXPECT_EQ(s.identity.job_id, "job-1");
  // The flags' optimizer: adam.
  EXPECT_EQ(StateNames(s), (std::vector<std::string>{"m", "v"}));
}

TEST_F(ShardBuilderTest, BuildsOnlyItsShardsSlices) {
  config_.num_servers = 2;
  config_.server_index = 1;
  ShardBuilder builder(config_, nullptr);
  absl::StatusOr<std::unique_ptr<DeclaredShard>> shard =
      builder.FromDeclaration(TwoTensors());
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->store->server_index(), 1);
  EXPECT_LT((*shard)->store->num_elements(), 16u);
  EXPECT_EQ((*shard)->identity.server_index, 1);
}

TEST_F(ShardBuilderTest, ADeclaredOptimizerReplacesTheFlags) {
  testing::LogCapture log;
  config_.coordinator.lr_schedule = *update::LearningRateSchedule::Create(
      update::LrScheduleKind::kCosine, config_.optimizer.learning_rate, 0);
  ModelSpec model = TwoTensors();
  OptimizerSpec sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.learning_rate = 0.25f;
  sgd.momentum = 0.5f;
  model.optimizer = sgd;
  ShardBuilder builder(config_, nullptr);
  absl::StatusOr<std::unique_ptr<DeclaredShard>> shard =
      builder.FromDeclaration(model);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(StateNames(**shard), std::vector<std::string>{"momentum"});
  // Its pushes carry their learning rate; the flags' schedule is unused.
  const CoordinatorOptions& options = (*shard)->coordinator->options();
  ASSERT_TRUE(options.lr_schedule.has_value());
  EXPECT_EQ(options.lr_schedule->kind(), update::LrScheduleKind::kConstant);
  EXPECT_FLOAT_EQ(options.lr_schedule->At(5, 10), 0.25f);
  EXPECT_THAT(log.text(), HasSubstr("--lr_schedule=cosine does not apply"));
  EXPECT_THAT(log.text(), HasSubstr("optimizer sgd(learning_rate 0.25"));
}

TEST_F(ShardBuilderTest, RefusesOptimizerFlagsThatContradictTheDeclaration) {
  config_.optimizer.learning_rate = 0.1f;
  config_.optimizer_given.learning_rate = true;
  ModelSpec model = TwoTensors();
  OptimizerSpec declared;
  declared.learning_rate = 0.2f;
  model.optimizer = declared;
  ShardBuilder builder(config_, nullptr);
  const absl::Status s = builder.FromDeclaration(model).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 0 declares"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--learning_rate=0.1"));
}

TEST_F(ShardBuilderTest, TheCoordinatorEndsTheJobThroughTheCallback) {
  config_.coordinator.num_workers = 1;
  // Set before the notification, read after it.
  absl::Status outcome = absl::UnknownError("not called");
  absl::Notification finished;
  ShardBuilder builder(config_, [&](const absl::Status& s) {
    outcome = s;
    finished.Notify();
  });
  absl::StatusOr<std::unique_ptr<DeclaredShard>> shard =
      builder.FromDeclaration(TwoTensors());
  ASSERT_TRUE(shard.ok()) << shard.status();
  UpdateCoordinator& coordinator = *(*shard)->coordinator;
  ASSERT_TRUE(coordinator.Register(0, 11, 0).ok());
  EXPECT_FALSE(finished.HasBeenNotified());
  EXPECT_TRUE(coordinator.MarkDone(0));
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_TRUE(outcome.ok()) << outcome;
}

TEST_F(ShardBuilderTest, CheckpointsWrittenAreCountedInTheMetrics) {
  const std::string dir = KeepCheckpoints();
  auto registry = std::make_shared<prometheus::Registry>();
  auto metrics = std::make_shared<ServerMetrics>(registry, 0);
  ShardBuilder builder(config_, nullptr);
  builder.set_metrics(metrics);
  absl::StatusOr<std::unique_ptr<DeclaredShard>> shard =
      builder.FromDeclaration(TwoTensors());
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_NE((*shard)->checkpointer, nullptr);
  EXPECT_FALSE(metrics->last_checkpoint().has_value());
  absl::StatusOr<std::string> path = (*shard)->checkpointer->WriteNow();
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, absl::StrCat(dir, "/", update::CheckpointFileName(0, 0)));
  EXPECT_TRUE(metrics->last_checkpoint().has_value());
}

TEST_F(ShardBuilderTest, AWorkerReplacedByANewProcessMakesACheckpointDue) {
  const std::string dir = KeepCheckpoints();
  ShardBuilder builder(config_, nullptr);
  absl::StatusOr<std::unique_ptr<DeclaredShard>> shard =
      builder.FromDeclaration(TwoTensors());
  ASSERT_TRUE(shard.ok()) << shard.status();
  UpdateCoordinator& coordinator = *(*shard)->coordinator;
  ASSERT_TRUE(coordinator.Register(0, 1, 0).ok());
  ASSERT_TRUE(coordinator.Register(1, 2, 0).ok());
  // The policy writes none by itself.
  EXPECT_TRUE(update::ListCheckpoints(dir, 0)->empty());
  // Rank 1 restarted: a checkpoint must record its new process.
  ASSERT_TRUE(coordinator.Register(1, 3, 0).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (update::ListCheckpoints(dir, 0)->empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(update::ListCheckpoints(dir, 0)->size(), 1u);
  absl::StatusOr<update::ShardCheckpoint> written =
      update::ReadCheckpoint(update::ListCheckpoints(dir, 0)->front());
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->ranks[1].incarnation, 3u);
}

TEST_F(ShardBuilderTest, RestoresAShardFromItsCheckpoint) {
  const std::string dir = KeepCheckpoints();
  update::ShardCheckpoint snapshot = SnapshotAt(6);
  ASSERT_EQ(snapshot.slices.size(), 2u);
  snapshot.slices[0].weights[1] = 42.0f;
  update::LoadedCheckpoint loaded;
  loaded.path = *update::WriteCheckpoint(dir, snapshot);
  loaded.checkpoint = snapshot;

  auto registry = std::make_shared<prometheus::Registry>();
  auto metrics = std::make_shared<ServerMetrics>(registry, 0);
  ShardBuilder builder(config_, nullptr);
  builder.set_metrics(metrics);
  absl::StatusOr<std::unique_ptr<DeclaredShard>> restored =
      builder.FromCheckpoint(loaded);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->coordinator->version(), 6u);
  EXPECT_EQ((*restored)->store->ReadSlice(0)[1], 42.0f);
  EXPECT_EQ((*restored)->declared_by,
            absl::StrCat("the checkpoint ", loaded.path));
  EXPECT_NE((*restored)->checkpointer, nullptr);
  // Counted as restored, with the checkpoint's time.
  EXPECT_TRUE(metrics->last_checkpoint().has_value());
  EXPECT_THAT(SerializeMetrics(*registry), HasSubstr("ps_server_restored 1"));
}

TEST_F(ShardBuilderTest, ACheckpointThatDoesNotFitIsRefusedNamingIt) {
  update::LoadedCheckpoint loaded;
  loaded.path = "/somewhere/shard-0-1.ckpt";
  loaded.checkpoint = SnapshotAt(1);
  ASSERT_EQ(loaded.checkpoint.slices.size(), 2u);
  loaded.checkpoint.slices.pop_back();
  ShardBuilder builder(config_, nullptr);
  const absl::Status s = builder.FromCheckpoint(loaded).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("cannot restore /somewhere/shard-0-1.ckpt: "));
}

TEST_F(ShardBuilderTest, StartsEmptyWithoutACheckpointToRestore) {
  ShardBuilder builder(config_, nullptr);
  absl::StatusOr<std::unique_ptr<DeclaredShard>> shard = builder.AtStart();
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(*shard, nullptr);

  KeepCheckpoints();
  config_.restore = RestoreMode::kRestore;
  shard = builder.AtStart();
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(*shard, nullptr);
}

TEST_F(ShardBuilderTest, StartsFromTheCheckpointRestoreChooses) {
  const std::string dir = KeepCheckpoints();
  ASSERT_TRUE(update::WriteCheckpoint(dir, SnapshotAt(3)).ok());
  ShardBuilder builder(config_, nullptr);

  // Without --restore, the directory is another run's.
  EXPECT_EQ(builder.AtStart().status().code(),
            absl::StatusCode::kInvalidArgument);
  config_.restore = RestoreMode::kRestore;
  absl::StatusOr<std::unique_ptr<DeclaredShard>> shard = builder.AtStart();
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_NE(*shard, nullptr);
  EXPECT_EQ((*shard)->coordinator->version(), 3u);
  EXPECT_EQ((*shard)->model().tensors.size(), 2u);
  // A checkpoint of another mode is not this run's.
  config_.coordinator.mode = ConsistencyMode::kAsync;
  EXPECT_EQ(builder.AtStart().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps::server
