// UpdateCoordinator snapshots and restores: a checkpoint's round trip, its
// identity checks, and a sync shard catching up after a restart.
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/coordinator_test_util.h"
#include "server/update_coordinator.h"
#include "update/checkpoint.h"

namespace ps::server {
namespace {

using ::ps::server::testing::Adam;
using ::ps::server::testing::AllWeights;
using ::ps::server::testing::ConstantPush;
using ::ps::server::testing::ExpectBitIdentical;
using ::ps::server::testing::ExpectShiftedBy;
using ::ps::server::testing::FastOptions;
using ::ps::server::testing::GradientValues;
using ::ps::server::testing::IncarnationOf;
using ::ps::server::testing::LogCapture;
using ::ps::server::testing::MakeStore;
using ::ps::server::testing::PlainSgd;
using ::ps::server::testing::Pull;
using ::ps::server::testing::RegisterAll;
using ::ps::server::testing::SetGradientValues;
using ::ps::server::testing::VariedPush;
using ::ps::update::ShardStore;

// With every rank registered as IncarnationOf(rank).
std::unique_ptr<UpdateCoordinator> Make(ShardStore* store,
                                        CoordinatorOptions options) {
  const int num_workers = options.num_workers;
  absl::StatusOr<std::unique_ptr<UpdateCoordinator>> c =
      UpdateCoordinator::Create(store, std::move(options));
  EXPECT_TRUE(c.ok()) << c.status();
  RegisterAll(**c, num_workers);
  return *std::move(c);
}

void ExpectSameSlices(const ShardStore& a, const ShardStore& b) {
  ASSERT_EQ(a.num_slices(), b.num_slices());
  for (int i = 0; i < a.num_slices(); ++i) {
    const update::SliceSnapshot sa = a.Snapshot(i), sb = b.Snapshot(i);
    EXPECT_EQ(sa.update_count, sb.update_count);
    ExpectBitIdentical({sa.weights}, {sb.weights}, "weights");
    ASSERT_EQ(sa.state.size(), sb.state.size());
    for (size_t v = 0; v < sa.state.size(); ++v) {
      EXPECT_EQ(sa.state[v].first, sb.state[v].first);
      ExpectBitIdentical({sa.state[v].second}, {sb.state[v].second},
                         sa.state[v].first);
    }
  }
}

std::string TempDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

TEST(CoordinatorRestoreTest, ARestoredShardContinuesBitIdentically) {
  auto store_a = MakeStore({12, 8, 4}, Adam(), 2, 1);
  auto a = Make(store_a.get(), FastOptions(ConsistencyMode::kSync, 2));
  ASSERT_TRUE(a->Register(0, IncarnationOf(0), 10).ok());
  ASSERT_TRUE(a->Register(1, IncarnationOf(1), 10).ok());
  for (uint64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(a->Commit(VariedPush(*store_a, 0, step)).ok());
    ASSERT_TRUE(a->Commit(VariedPush(*store_a, 1, step)).ok());
  }
  ASSERT_FALSE(a->MarkDone(0));
  // Rank 1's push for step 3 waits for nobody (rank 0 is done) and is
  // applied; then a snapshot, through a file.
  ASSERT_EQ(*a->Commit(VariedPush(*store_a, 1, 3)), 4u);
  const update::ShardCheckpoint taken = a->Snapshot();
  EXPECT_EQ(taken.version, 4u);
  EXPECT_EQ(taken.planned_steps, 10u);
  ASSERT_EQ(taken.ranks.size(), 2u);
  EXPECT_EQ(taken.ranks[0],
            (update::RankRecord{IncarnationOf(0), 3, {0, 9}, true}));
  EXPECT_EQ(taken.ranks[1],
            (update::RankRecord{IncarnationOf(1), 4, {0, 16}, false}));
  EXPECT_EQ(taken.examples.at(0), (std::vector<uint64_t>{9, 16}));
  const std::string dir = TempDir("round_trip");
  ASSERT_TRUE(update::WriteCheckpoint(dir, taken).ok());
  absl::StatusOr<std::optional<update::LoadedCheckpoint>> loaded =
      update::LoadNewestCheckpoint(dir, a->identity());
  ASSERT_TRUE(loaded.ok() && loaded->has_value()) << loaded.status();

  auto store_b = MakeStore({12, 8, 4}, Adam(), 2, 1);
  auto b = Make(store_b.get(), FastOptions(ConsistencyMode::kSync, 2));
  ASSERT_TRUE(b->Restore((*loaded)->checkpoint).ok());
  ExpectSameSlices(*store_a, *store_b);
  EXPECT_EQ(b->version(), 4u);
  EXPECT_EQ(b->Snapshot().ranks, taken.ranks);
  // Counts, progress, staleness; but restored without an update log, the
  // updates after the checkpoint are lost and the report says so.
  const std::string lost_line =
      "updates lost in restarts: unknown: restored from the checkpoint of "
      "version 4 without an update log, so the updates this shard applied "
      "after it are lost\n";
  std::string b_report = b->Report();
  const size_t lost_at = b_report.find(lost_line);
  ASSERT_NE(lost_at, std::string::npos) << b_report;
  b_report.replace(lost_at, lost_line.size(), "updates lost in restarts: 0\n");
  EXPECT_EQ(b_report, a->Report());
  // Both go on the same way.
  for (UpdateCoordinator* c : {a.get(), b.get()}) {
    ShardStore* store = c == a.get() ? store_a.get() : store_b.get();
    ASSERT_EQ(*c->Commit(VariedPush(*store, 1, 4)), 5u);
  }
  ExpectSameSlices(*store_a, *store_b);
}

TEST(CoordinatorRestoreTest, RefusesAnotherJobsCheckpointChangingNothing) {
  auto store = MakeStore({12, 8, 4}, PlainSgd());
  auto two = Make(store.get(), FastOptions(ConsistencyMode::kSync, 2));
  ASSERT_TRUE(two->Commit(ConstantPush(*store, 0, 0, 1)).ok());
  ASSERT_TRUE(two->Commit(ConstantPush(*store, 1, 0, 1)).ok());
  const update::ShardCheckpoint taken = two->Snapshot();

  struct Case {
    std::vector<int> layers;
    ConsistencyMode mode;
    int workers;
    const char* text;
  };
  const Case cases[] = {
      {{12, 9, 4},
       ConsistencyMode::kSync,
       2,
       "tensor 0 \"fc0.weight\" shape: [12,9] declared by this shard, "
       "[12,8] by the checkpoint"},
      {{12, 8, 4}, ConsistencyMode::kAsync, 2, "another mode: sync"},
      {{12, 8, 4}, ConsistencyMode::kSync, 3, "another worker count: 2"},
  };
  for (const Case& c : cases) {
    auto other_store = MakeStore(c.layers, PlainSgd());
    const auto before = AllWeights(*other_store);
    auto other = Make(other_store.get(), FastOptions(c.mode, c.workers));
    absl::Status s = other->Restore(taken);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << c.text;
    EXPECT_NE(s.message().find(c.text), std::string::npos) << s;
    EXPECT_EQ(other->version(), 0u);
    EXPECT_EQ(AllWeights(*other_store), before);
  }
}

// A sync shard restored at version 2 while the workers are further on.
class SyncRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto old_store = MakeStore({6, 4, 2}, PlainSgd());
    auto old = Make(old_store.get(), FastOptions(ConsistencyMode::kSync, 2));
    for (uint64_t step = 0; step < 2; ++step) {
      ASSERT_TRUE(old->Commit(ConstantPush(*old_store, 0, step, 1)).ok());
      ASSERT_TRUE(old->Commit(ConstantPush(*old_store, 1, step, 1)).ok());
    }
    store_ = MakeStore({6, 4, 2}, PlainSgd());
    CoordinatorOptions options = FastOptions(ConsistencyMode::kSync, 2);
    options.fast_forward_after_restart = true;
    coord_ = Make(store_.get(), options);
    ASSERT_TRUE(coord_->Restore(old->Snapshot()).ok());
    ASSERT_EQ(coord_->version(), 2u);
  }

  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<UpdateCoordinator> coord_;
};

TEST_F(SyncRestartTest, APushForALaterStepFastForwards) {
  LogCapture log;
  const auto before = AllWeights(*store_);
  EXPECT_EQ(*coord_->Commit(ConstantPush(*store_, 0, 5, 1)), 5u);
  EXPECT_NE(log.text().find("fast-forwarded from version 2 to 5 after "
                            "restore: 3 updates of this shard lost"),
            std::string::npos)
      << log.text();
  EXPECT_EQ(*coord_->Commit(ConstantPush(*store_, 1, 5, 3)), 6u);
  ExpectShiftedBy(before, AllWeights(*store_), 2.0f);
  EXPECT_NE(coord_->Report().find("updates lost in restarts: unknown: "
                                  "restored from the checkpoint of version 2 "
                                  "without an update log, so the updates "
                                  "this shard applied after it are lost (3 "
                                  "steps fast-forwarded)"),
            std::string::npos)
      << coord_->Report();
  // Caught up: a later step is ahead again, not a fast-forward.
  EXPECT_EQ(coord_->Commit(ConstantPush(*store_, 0, 9, 1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(SyncRestartTest, APullForALaterStepFastForwards) {
  EXPECT_EQ(*Pull(*coord_, 0, 4), 4u);
  // Rank 1 had not finished step 3 here: stale, it pulls again.
  EXPECT_EQ(coord_->Commit(ConstantPush(*store_, 1, 3, 1)).status().code(),
            absl::StatusCode::kAborted);
}

TEST_F(SyncRestartTest, APushLostInTheCrashTakesPartWithWeightZero) {
  const auto before = AllWeights(*store_);
  ASSERT_TRUE(coord_->Commit(ConstantPush(*store_, 0, 2, 4)).ok());
  // Rank 1 pushed step 2 before the crash and now pulls for step 3.
  EXPECT_EQ(*Pull(*coord_, 1, 3), 3u);
  ExpectShiftedBy(before, AllWeights(*store_), 4.0f);
}

// The worker is one step ahead and blocked on another shard, so it does
// not pull here: only its heartbeats say where it is. Without its step in
// them, this shard would wait for its lost push for as long as they keep it
// alive, and the other shard for this one.
TEST_F(SyncRestartTest, AHeartbeatPastALostPushTakesPartWithWeightZero) {
  const auto before = AllWeights(*store_);
  ASSERT_TRUE(coord_->Commit(ConstantPush(*store_, 0, 2, 4)).ok());
  // A heartbeat without a step changes nothing.
  EXPECT_EQ(*coord_->Heartbeat(1, IncarnationOf(1)), 2u);
  EXPECT_EQ(*coord_->Heartbeat(1, IncarnationOf(1), 3), 3u);
  ExpectShiftedBy(before, AllWeights(*store_), 4.0f);
}

// A run of one worker planned for 2 steps, checkpointed after them, then
// extended to 4: the step bound and the cosine's horizon move with the
// plan.
TEST(CoordinatorRestoreTest, AnExtendedRunTakesItsWorkersNewPlan) {
  CoordinatorOptions options = FastOptions(ConsistencyMode::kSync, 1);
  options.lr_schedule = *update::LearningRateSchedule::Create(
      update::LrScheduleKind::kCosine, 1.0f, 0.0f);
  auto make = [&](ShardStore* store, bool replan) {
    CoordinatorOptions o = options;
    o.replan_after_restore = replan;
    return *UpdateCoordinator::Create(store, std::move(o));
  };
  auto old_store = MakeStore({6, 4, 2}, PlainSgd());
  auto old = make(old_store.get(), false);
  ASSERT_TRUE(old->Register(0, IncarnationOf(0), 2).ok());
  for (uint64_t step = 0; step < 2; ++step) {
    ASSERT_TRUE(old->Commit(ConstantPush(*old_store, 0, step, 1)).ok());
  }
  const update::ShardCheckpoint finished = old->Snapshot();
  ASSERT_EQ(finished.planned_steps, 2u);

  // Restored as it was, the run keeps its plan.
  auto kept_store = MakeStore({6, 4, 2}, PlainSgd());
  auto kept = make(kept_store.get(), false);
  ASSERT_TRUE(kept->Restore(finished).ok());
  absl::StatusOr<RankProgress> refused = kept->Register(0, IncarnationOf(0), 4);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(
                "the run of the restored checkpoint planned 2"),
            std::string::npos)
      << refused.status();

  // Extended, the first plan registered replaces the checkpoint's.
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto extended = make(store.get(), true);
  ASSERT_TRUE(extended->Restore(finished).ok());
  {
    LogCapture log;
    absl::StatusOr<RankProgress> resumed =
        extended->Register(0, IncarnationOf(0), 4);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->next_step, 2u);
    EXPECT_NE(log.text().find("worker 0 plans 4 steps where the restored run "
                              "planned 2"),
              std::string::npos)
        << log.text();
  }
  // Update 2 of 4 is halfway down the cosine: 0.5 (past the old horizon of
  // 2 it would be the floor, 0).
  const auto before = AllWeights(*store);
  EXPECT_EQ(*extended->Commit(ConstantPush(*store, 0, 2, 1)), 3u);
  ExpectShiftedBy(before, AllWeights(*store), 0.5f);
  EXPECT_TRUE(Pull(*extended, 0, 4).ok());
  const absl::Status beyond = Pull(*extended, 0, 5).status();
  EXPECT_EQ(beyond.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(beyond.message().find("1 workers x 4 planned steps"),
            std::string::npos)
      << beyond;
  // The new plan holds from then on.
  EXPECT_EQ(extended->Register(0, IncarnationOf(0) + 1, 6).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A checkpoint must learn of a replacing process before a restart of the
// shard restores it; the first registration of a rank replaces nothing.
TEST(CoordinatorRestoreTest, ANewIncarnationIsAnnounced) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  CoordinatorOptions options = FastOptions(ConsistencyMode::kSync, 2);
  std::atomic<int> announced{0};
  options.on_new_incarnation = [&announced] { ++announced; };
  auto coord = *UpdateCoordinator::Create(store.get(), std::move(options));
  ASSERT_TRUE(coord->Register(0, 11, 0).ok());
  ASSERT_TRUE(coord->Register(1, 21, 0).ok());
  ASSERT_TRUE(coord->Register(1, 21, 0).ok());  // The same process again.
  EXPECT_EQ(announced.load(), 0);
  ASSERT_TRUE(coord->Register(1, 22, 0).ok());
  EXPECT_EQ(announced.load(), 1);
  EXPECT_EQ(coord->Register(0, 12, 5).status().code(), absl::StatusCode::kOk);
  EXPECT_EQ(announced.load(), 2);
  // A refused registration replaces nothing.
  EXPECT_FALSE(coord->Register(0, 13, 6).ok());
  EXPECT_EQ(announced.load(), 2);
}

TEST(CoordinatorRestoreTest, WithoutARestartALaterStepWaits) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = Make(store.get(), FastOptions(ConsistencyMode::kSync, 2));
  const absl::Time give_up = absl::Now() + absl::Milliseconds(50);
  EXPECT_EQ(coord
                ->AwaitPull(0, IncarnationOf(0), 3,
                            [&] { return absl::Now() > give_up; })
                .status()
                .code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(coord->version(), 0u);
  EXPECT_EQ(coord->Commit(ConstantPush(*store, 0, 3, 1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps::server
