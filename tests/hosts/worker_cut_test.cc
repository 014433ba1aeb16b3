// A worker's host cut off from the network for longer than the shards'
// --worker_timeout, in elastic sync training, then plugged back in: four
// test hosts (server 0, server 1, worker 0, worker 1, one each) joined by
// 1 Gbit/s links. The shards, which still hear worker 0, declare worker 1
// dead and go on without it; when its link is back it rejoins (its push
// for a step that went on without it is refused as stale and its batch
// retried), the job finishes, and every shard counts each example of each
// rank once. Skips (saying why) where network namespaces cannot be made.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/hosts/host_job.h"
#include "tests/hosts/skip_without_hosts.h"
#include "tests/hosts/test_hosts.h"
#include "update/checkpoint.h"

namespace ps::testing {
namespace {

constexpr int64_t kGbit = 1000 * 1000 * 1000;
// Bounds a hang only: nothing is asserted against a time.
constexpr absl::Duration kTimeout = absl::Seconds(300);
constexpr int kSteps = 100;
constexpr int kBatch = 32;
constexpr int kServerHost[] = {0, 1};
constexpr int kWorkerHost[] = {2, 3};
constexpr int kCutRank = 1;
// The shards' version when worker 1's host is cut off: well inside the job.
constexpr double kCutAtVersion = 10;
// Steps the shards take without worker 1 before its link comes back.
constexpr double kStepsWithoutIt = 5;

TEST(WorkerCutTest, ElasticSyncGoesOnWithoutItAndItRejoins) {
  SKIP_WITHOUT_TEST_HOSTS();
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(4, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;
  absl::StatusOr<std::unique_ptr<HostJob>> started = HostJob::Start(
      &hosts, {kServerHost[0], kServerHost[1]}, 2,
      {"--mode=sync", "--on_worker_failure=elastic", "--optimizer=sgd",
       "--learning_rate=0.05", "--worker_timeout=3s",
       // The shards wait for the cut worker however long it takes.
       "--rejoin_grace=1h", "--slow_wait_log=2s", "--checkpoint_every_steps=0",
       "--checkpoint_every_seconds=0"},
      kTimeout);
  ASSERT_TRUE(started.ok()) << started.status();
  HostJob& job = **started;
  for (int rank : {0, 1}) {
    ASSERT_TRUE(
        job.StartWorker(rank, kWorkerHost[rank],
                        {absl::StrCat("--batch_size=", kBatch), "--epochs=1",
                         absl::StrCat("--max_steps=", kSteps), "--mode=sync",
                         "--log_every=20",
                         // Long enough that the cut lands in the
                         // middle of the job.
                         "--slowdown_ms=50"})
            .ok());
  }
  auto version = [&](int index) {
    return
        [&job, index] { return job.ServerMetric(index, "ps_server_version"); };
  };
  ASSERT_TRUE(AwaitValue(
                  "shard 0's version", version(0),
                  [](double v) { return v >= kCutAtVersion; }, kTimeout)
                  .ok());
  ASSERT_TRUE(hosts.SetLinkDown(kWorkerHost[kCutRank]).ok());
  absl::StatusOr<double> at_cut = version(0)();
  ASSERT_TRUE(at_cut.ok()) << at_cut.status();
  ASSERT_LT(*at_cut, kSteps) << "the job ended before its worker was cut";
  // Both shards give it up, then step on without it. The cut lasts that
  // long, however long it is.
  for (int index : {0, 1}) {
    absl::Status dead = AwaitValue(
        absl::StrCat("worker ", kCutRank, " dead on shard ", index),
        [&job, index] {
          return job.ServerMetric(index, "ps_server_rank_dead",
                                  {{"rank", absl::StrCat(kCutRank)}});
        },
        [](double v) { return v == 1; }, kTimeout);
    ASSERT_TRUE(dead.ok()) << dead;
    absl::StatusOr<double> now = version(index)();
    ASSERT_TRUE(now.ok()) << now.status();
    absl::Status went_on = AwaitValue(
        absl::StrCat("shard ", index, " stepping on without worker ", kCutRank),
        version(index), [&](double v) { return v >= *now + kStepsWithoutIt; },
        kTimeout);
    ASSERT_TRUE(went_on.ok()) << went_on;
  }
  ASSERT_TRUE(hosts.SetLinkUp(kWorkerHost[kCutRank]).ok());

  // It rejoined and finished: every process exited 0.
  absl::Status ended = job.Wait(kTimeout);
  ASSERT_TRUE(ended.ok()) << ended;
  for (int index : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "shard " << index);
    absl::StatusOr<update::ShardCheckpoint> last = job.LastCheckpoint(index);
    ASSERT_TRUE(last.ok()) << last.status();
    std::printf("shard %d: version %llu, examples per epoch of each rank:",
                index, static_cast<unsigned long long>(last->version));
    for (const auto& [epoch, counts] : last->examples) {
      std::printf(" epoch %llu: %s", static_cast<unsigned long long>(epoch),
                  absl::StrJoin(counts, ", ").c_str());
    }
    std::printf("\n");
    // Steps went on with worker 0 alone: more steps than each worker took.
    EXPECT_GT(last->version, uint64_t{kSteps});
    // Each rank's examples counted once: the batch it retried after its
    // stale push, once.
    ASSERT_EQ(last->examples.size(), 1u) << "one epoch";
    EXPECT_EQ(last->examples.at(0),
              std::vector<uint64_t>(2, uint64_t{kSteps} * kBatch));
    for (int rank : {0, 1}) {
      EXPECT_EQ(last->ranks[rank].progress.examples_done,
                uint64_t{kSteps} * kBatch)
          << "rank " << rank;
      EXPECT_TRUE(last->ranks[rank].done) << "rank " << rank;
    }
  }
}

}  // namespace
}  // namespace ps::testing
