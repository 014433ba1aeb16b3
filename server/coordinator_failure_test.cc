// UpdateCoordinator under worker failures: leases, the fail and elastic
// policies, rejoining processes, replays and Done.
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator_test_util.h"
#include "server/update_coordinator.h"

namespace ps::server {
namespace {

using ::ps::server::testing::AllWeights;
using ::ps::server::testing::ConstantPush;
using ::ps::server::testing::ExpectShiftedBy;
using ::ps::server::testing::FastOptions;
using ::ps::server::testing::IncarnationOf;
using ::ps::server::testing::MakeStore;
using ::ps::server::testing::PlainSgd;
using ::ps::server::testing::Pull;
using ::ps::server::testing::RegisterAll;

// For tests that expect a lease to run out; they wait for it, so a slow
// machine only makes them slower.
constexpr absl::Duration kTimeout = absl::Milliseconds(200);
// For tests that expect no lease to run out: longer than any test may run.
constexpr absl::Duration kLongLease = absl::Minutes(10);
// How long checks that stalls of this thread spoiled (see StallWatch) are
// run again before one counts anyway.
constexpr absl::Duration kRetryFor = absl::Seconds(60);

// With every rank registered as IncarnationOf(rank), unless a test
// registers its own.
std::unique_ptr<UpdateCoordinator> Make(update::ShardStore* store,
                                        CoordinatorOptions options,
                                        bool register_all = true) {
  const int num_workers = options.num_workers;
  absl::StatusOr<std::unique_ptr<UpdateCoordinator>> c =
      UpdateCoordinator::Create(store, std::move(options));
  EXPECT_TRUE(c.ok()) << c.status();
  if (register_all) RegisterAll(**c, num_workers);
  return *std::move(c);
}

CoordinatorOptions ShortLease(ConsistencyMode mode, int workers) {
  CoordinatorOptions options = FastOptions(mode, workers);
  options.worker_timeout = kTimeout;
  options.rejoin_grace = kTimeout;
  return options;
}

CoordinatorOptions LongLease(ConsistencyMode mode, int workers) {
  CoordinatorOptions options = FastOptions(mode, workers);
  options.worker_timeout = kLongLease;
  return options;
}

// Watches a thread that renews short leases (kTimeout) between calls to
// Tick() and checks liveness before its last call. While ticks come at most
// half a lease apart, renewals come less than a lease apart and no lease can
// run out. A loaded machine may stall the thread for longer: a lease may
// then run out legitimately, and the run proves nothing about liveness.
class StallWatch {
 public:
  void Tick() {
    const absl::Time now = absl::Now();
    stalled_ = stalled_ || now - last_ > kTimeout / 2;
    last_ = now;
  }
  bool stalled() const { return stalled_; }

 private:
  absl::Time last_ = absl::Now();
  bool stalled_ = false;
};

// Runs `renew_and_check`, which renews the leases its check needs and then
// checks, until a run is not stalled (for at most kRetryFor); returns the
// last run's result.
template <typename F>
auto Unstalled(F renew_and_check) {
  const absl::Time give_up = absl::Now() + kRetryFor;
  for (;;) {
    StallWatch watch;
    auto result = renew_and_check();
    watch.Tick();
    if (!watch.stalled() || absl::Now() >= give_up) return result;
  }
}

StagedPush From(StagedPush push, uint64_t incarnation) {
  push.incarnation = incarnation;
  return push;
}

TEST(CoordinatorFailureTest, ElasticSyncStepGoesOnWithoutADeadWorker) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  const absl::Time start = absl::Now();
  auto coord = Make(store.get(), ShortLease(ConsistencyMode::kSync, 2));
  const auto before = AllWeights(*store);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 2.0f, 4)).ok());
  // Rank 1 is never heard from: the pull returns once its lease is over.
  absl::StatusOr<uint64_t> pulled = Pull(*coord, 0, 1);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(*pulled, 1u);
  EXPECT_GE(absl::Now() - start, kTimeout);
  ExpectShiftedBy(before, AllWeights(*store), 2.0f);  // Rank 0's alone.

  // Rank 1 was slow, not dead: its push for the finished step is stale,
  // and the request makes it live again, so step 1 waits for it (and for
  // rank 0, which heartbeats).
  const auto [late, blocking] = Unstalled([&] {
    EXPECT_TRUE(coord->Heartbeat(0, IncarnationOf(0)).ok());
    absl::StatusOr<uint64_t> late =
        coord->Commit(ConstantPush(*store, 1, 0, 5));
    return std::pair(late.status(), coord->RanksBlocking(2));
  });
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted);
  EXPECT_NE(late.message().find("stale step 0"), std::string::npos);
  EXPECT_EQ(blocking, (std::vector<int>{0, 1}));
}

TEST(CoordinatorFailureTest, FailPolicyAbortsWaitingAndLaterRequests) {
  const absl::Time give_up = absl::Now() + kRetryFor;
  for (int attempt = 1;; ++attempt) {
    SCOPED_TRACE(::testing::Message() << "attempt " << attempt);
    absl::Notification finished;
    absl::Status outcome;
    auto store = MakeStore({6, 4, 2}, PlainSgd());
    CoordinatorOptions options = ShortLease(ConsistencyMode::kSync, 2);
    options.on_worker_failure = FailurePolicy::kFail;
    options.on_finished = [&](const absl::Status& s) {
      outcome = s;
      finished.Notify();
    };
    StallWatch watch;
    auto coord = Make(store.get(), options);
    const absl::Status pushed =
        coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).status();
    // Rank 1 is never heard from; rank 0's waiting pull renews its lease at
    // every poll, each followed by this cancellation check, which
    // heartbeats as its client would (rank 0's requests show that the shard
    // still hears the network).
    absl::StatusOr<uint64_t> pulled =
        coord->AwaitPull(0, IncarnationOf(0), 1, [&] {
          watch.Tick();
          (void)coord->Heartbeat(0, IncarnationOf(0));
          return false;
        });
    watch.Tick();
    // Rank 0 may have died with rank 1: the message would name both.
    if (watch.stalled() && absl::Now() < give_up) continue;
    ASSERT_TRUE(pushed.ok()) << pushed;
    EXPECT_EQ(pulled.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(pulled.status().message(),
              "worker 1 is dead (no heartbeat for 200ms); "
              "--on_worker_failure=fail stops the job");
    ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_EQ(outcome, pulled.status());
    EXPECT_EQ(coord->failure(), pulled.status());
    EXPECT_EQ(coord->Register(0, 1, 0).status(), pulled.status());
    EXPECT_EQ(coord->Heartbeat(1, IncarnationOf(1)).status(), pulled.status());
    EXPECT_EQ(coord->Commit(ConstantPush(*store, 1, 0, 1.0f)).status(),
              pulled.status());
    EXPECT_EQ(coord->version(), 0u);
    break;
  }
}

TEST(CoordinatorFailureTest, WaitingPullsAndHeartbeatsKeepWorkersAlive) {
  const absl::Time give_up = absl::Now() + kRetryFor;
  for (int attempt = 1;; ++attempt) {
    SCOPED_TRACE(::testing::Message() << "attempt " << attempt);
    auto store = MakeStore({6, 4, 2}, PlainSgd());
    StallWatch watch;
    auto coord = Make(store.get(), ShortLease(ConsistencyMode::kSync, 2));
    ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).ok());
    // Three leases long: rank 0 waits in its pull, rank 1 only heartbeats.
    // Both from this thread, so that the watch sees any stall: the pull
    // renews rank 0's lease at every poll, each followed by this
    // cancellation check, which heartbeats for rank 1.
    const absl::Time until = absl::Now() + 3 * kTimeout;
    std::string report;
    std::vector<int> blocking;
    absl::StatusOr<uint64_t> pulled =
        coord->AwaitPull(0, IncarnationOf(0), 1, [&] {
          watch.Tick();
          EXPECT_TRUE(coord->Heartbeat(1, IncarnationOf(1)).ok());
          if (absl::Now() < until) return false;
          report = coord->Report();
          blocking = coord->RanksBlocking(1);
          return true;
        });
    watch.Tick();
    // Either lease may have run out: the step may have gone on without 1.
    if (watch.stalled() && absl::Now() < give_up) continue;
    // Still waiting after three leases: nobody was declared dead.
    EXPECT_EQ(pulled.status().code(), absl::StatusCode::kCancelled)
        << pulled.status();
    EXPECT_NE(report.find("workers: 0=live 1=live"), std::string::npos)
        << report;
    EXPECT_EQ(blocking, std::vector<int>{1});
    ASSERT_TRUE(coord->Commit(ConstantPush(*store, 1, 0, 1.0f)).ok());
    EXPECT_EQ(*Pull(*coord, 0, 1), 1u);
    break;
  }
}

TEST(CoordinatorFailureTest, SspMinimumIgnoresDeadRanksUntilTheyReturn) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = Make(store.get(), ShortLease(ConsistencyMode::kSsp, 2));
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).ok());
  // s = 0: a pull for step 1 needs rank 1 at step 1, until rank 1 is dead.
  EXPECT_EQ(*Pull(*coord, 0, 1), 1u);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 1, 1.0f)).ok());
  // A restarted rank 1 registers and resumes at its recorded next step; the
  // minimum counts it again from then on.
  const auto [rejoined, blocking] = Unstalled([&] {
    absl::StatusOr<RankProgress> rejoined = coord->Register(1, 7, 0);
    return std::pair(rejoined, coord->RanksBlocking(2));
  });
  ASSERT_TRUE(rejoined.ok()) << rejoined.status();
  EXPECT_EQ(rejoined->next_step, 0u);
  EXPECT_EQ(blocking, std::vector<int>{1});
}

TEST(CoordinatorFailureTest, RestartedWorkerRejoinsAndTheOldProcessIsRefused) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = Make(store.get(), LongLease(ConsistencyMode::kSync, 2),
                    /*register_all=*/false);
  ASSERT_TRUE(coord->Register(0, 10, 0).ok());
  ASSERT_TRUE(coord->Register(1, 20, 0).ok());
  ASSERT_TRUE(coord->Commit(From(ConstantPush(*store, 0, 0, 1), 10)).ok());
  ASSERT_EQ(*coord->Commit(From(ConstantPush(*store, 1, 0, 1), 20)), 1u);
  ASSERT_TRUE(coord->Commit(From(ConstantPush(*store, 1, 1, 1), 20)).ok());
  // The old process waits for step 1, which waits for rank 0.
  absl::StatusOr<uint64_t> old_pull;
  std::thread old_puller(
      [&] { old_pull = coord->AwaitPull(1, 20, 2, [] { return false; }); });
  absl::SleepFor(absl::Milliseconds(50));

  // Rank 1's process is replaced: it resumes at the current step, from its
  // recorded progress (its push for step 1 is taken).
  absl::StatusOr<RankProgress> rejoined = coord->Register(1, 21, 0);
  ASSERT_TRUE(rejoined.ok());
  EXPECT_EQ(rejoined->next_step, 1u);
  EXPECT_EQ(rejoined->epoch, 0u);
  EXPECT_EQ(rejoined->examples_done, 2u);
  old_puller.join();
  EXPECT_EQ(old_pull.status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<uint64_t> old_push =
      coord->Commit(From(ConstantPush(*store, 1, 2, 1), 20));
  EXPECT_EQ(old_push.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(old_push.status().message().find(
                "incarnation 20 of worker 1, but incarnation 21 has "
                "registered since"),
            std::string::npos)
      << old_push.status();
  EXPECT_EQ(coord->Heartbeat(1, 20).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(*coord->Commit(From(ConstantPush(*store, 0, 1, 1), 10)), 2u);
  EXPECT_TRUE(coord->Commit(From(ConstantPush(*store, 1, 2, 1), 21)).ok());
  EXPECT_EQ(coord->RanksBlocking(3), std::vector<int>{0});
}

TEST(CoordinatorFailureTest, ARejoinedWorkerResendingItsPendingPushIsAcked) {
  // Killed after pushing to this shard but before the others: the new
  // process resumes from the other shards' (earlier) progress and resends.
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = Make(store.get(), LongLease(ConsistencyMode::kSync, 2),
                    /*register_all=*/false);
  ASSERT_TRUE(coord->Register(0, IncarnationOf(0), 0).ok());
  ASSERT_TRUE(coord->Register(1, 20, 0).ok());
  const auto before = AllWeights(*store);
  ASSERT_TRUE(coord->Commit(From(ConstantPush(*store, 1, 0, 3), 20)).ok());
  ASSERT_EQ(coord->Register(1, 21, 0)->examples_done, 1u);
  EXPECT_EQ(*coord->Commit(From(ConstantPush(*store, 1, 0, 9), 21)), 0u);
  ASSERT_EQ(*coord->Commit(ConstantPush(*store, 0, 0, 1)), 1u);
  ExpectShiftedBy(before, AllWeights(*store), 2.0f);  // Mean of 1 and 3.
}

TEST(CoordinatorFailureTest, APullPastAStepNotPushedHereDoesNotWaitForIt) {
  // Rank 1's step 0 went on without it on another shard and it moved on;
  // here it never pushed step 0, and its pull must not wait for itself.
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = Make(store.get(), LongLease(ConsistencyMode::kSync, 2));
  const auto before = AllWeights(*store);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 2)).ok());
  EXPECT_EQ(*Pull(*coord, 1, 1), 1u);
  ExpectShiftedBy(before, AllWeights(*store), 2.0f);
  // Step 1, with the batch it retried after step 0 went on without it.
  StagedPush retried = ConstantPush(*store, 1, 1, 4);
  retried.examples_done = 1;
  EXPECT_EQ(*coord->Commit(std::move(retried)), 1u);
}

TEST(CoordinatorFailureTest, ADoneWorkerNoLongerCountsInSync) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = Make(store.get(), LongLease(ConsistencyMode::kSync, 2));
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1)).ok());
  EXPECT_FALSE(coord->MarkDone(1));  // Completes step 0.
  EXPECT_EQ(coord->version(), 1u);
  EXPECT_EQ(*coord->Commit(ConstantPush(*store, 0, 1, 1)), 2u);
  EXPECT_EQ(coord->Commit(ConstantPush(*store, 1, 2, 1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(coord->MarkDone(0));
}

TEST(CoordinatorFailureTest, JobGoesOnWhileAWorkerMayStillCome) {
  absl::Notification finished;
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  CoordinatorOptions options = LongLease(ConsistencyMode::kAsync, 3);
  options.on_finished = [&](const absl::Status&) { finished.Notify(); };
  auto coord = Make(store.get(), options);
  EXPECT_FALSE(coord->MarkDone(0));
  EXPECT_FALSE(coord->MarkDone(1));
  EXPECT_FALSE(finished.HasBeenNotified());  // Rank 2 may still come.
}

TEST(CoordinatorFailureTest, JobFinishesOnceEveryWorkerIsDoneOrDead) {
  absl::Notification finished;
  absl::Status outcome = absl::UnknownError("not called");
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  CoordinatorOptions options = ShortLease(ConsistencyMode::kAsync, 3);
  options.on_finished = [&](const absl::Status& s) {
    outcome = s;
    finished.Notify();
  };
  auto coord = Make(store.get(), options);
  coord->MarkDone(0);
  coord->MarkDone(1);
  // Once rank 2 is dead for its lease and the rejoin grace.
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(outcome.ok()) << outcome;
  EXPECT_NE(coord->Report().find("workers: 0=done 1=done 2=dead"),
            std::string::npos)
      << coord->Report();
}

// Rank 0's final pull (PullRequest.after_others_finish) holds every other
// rank's last update.
TEST(CoordinatorFailureTest, FinalPullWaitsUntilTheOthersFinish) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = Make(store.get(), LongLease(ConsistencyMode::kAsync, 3));
  absl::Notification answered;
  absl::StatusOr<uint64_t> final_version;
  std::thread rank0([&] {
    final_version =
        coord->AwaitOthersFinished(0, IncarnationOf(0), [] { return false; });
    answered.Notify();
  });
  // Rank 1 is still training; rank 2 has not even started.
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 1, 0, 1.0f)).ok());
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 1, 1, 1.0f)).ok());
  EXPECT_FALSE(answered.WaitForNotificationWithTimeout(kTimeout));
  coord->MarkDone(1);
  EXPECT_FALSE(answered.WaitForNotificationWithTimeout(kTimeout));
  // Rank 2 finishing too: neither waits for the other.
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 2, 0, 1.0f)).ok());
  absl::StatusOr<uint64_t> rank2 =
      coord->AwaitOthersFinished(2, IncarnationOf(2), [] { return false; });
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  rank0.join();
  ASSERT_TRUE(final_version.ok()) << final_version.status();
  EXPECT_EQ(*final_version, 3u);  // Every push is in.
  ASSERT_TRUE(rank2.ok()) << rank2.status();
  EXPECT_EQ(*rank2, 3u);
}

// A sync rank in its final pull takes no part in steps, as a done one does:
// the rank it waits for (e.g. restarted, behind on its data) goes on alone.
TEST(CoordinatorFailureTest, SyncStepsGoOnWithoutAFinishingRank) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = Make(store.get(), LongLease(ConsistencyMode::kSync, 2));
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).ok());
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 1, 0, 1.0f)).ok());
  // Rank 1 pushed step 1 before rank 0 finished: the step waited for it.
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 1, 1, 1.0f)).ok());
  EXPECT_EQ(coord->version(), 1u);
  absl::Notification answered;
  absl::StatusOr<uint64_t> final_version;
  std::thread rank0([&] {
    final_version =
        coord->AwaitOthersFinished(0, IncarnationOf(0), [] { return false; });
    answered.Notify();
  });
  EXPECT_EQ(*Pull(*coord, 1, 2), 2u);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 1, 2, 1.0f)).ok());
  EXPECT_EQ(*Pull(*coord, 1, 3), 3u);
  EXPECT_FALSE(answered.HasBeenNotified());
  coord->MarkDone(1);
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  rank0.join();
  ASSERT_TRUE(final_version.ok()) << final_version.status();
  EXPECT_EQ(*final_version, 3u);
}

TEST(CoordinatorFailureTest, FinalPullStopsWaitingForARankGoneForGood) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = Make(store.get(), ShortLease(ConsistencyMode::kAsync, 2));
  const absl::Time start = absl::Now();
  // Rank 1 never shows up: dead after its lease (rank 0 heartbeats, as its
  // client does), gone after the grace.
  absl::StatusOr<uint64_t> version =
      coord->AwaitOthersFinished(0, IncarnationOf(0), [&] {
        (void)coord->Heartbeat(0, IncarnationOf(0));
        return false;
      });
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 0u);
  EXPECT_GE(absl::Now() - start, 2 * kTimeout);
  // The caller gave up: Cancelled, naming the wait.
  absl::StatusOr<uint64_t> cancelled =
      Make(store.get(), LongLease(ConsistencyMode::kAsync, 2))
          ->AwaitOthersFinished(0, IncarnationOf(0), [] { return true; });
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled);
  EXPECT_NE(cancelled.status().message().find("final pull"), std::string::npos);
}

}  // namespace
}  // namespace ps::server
