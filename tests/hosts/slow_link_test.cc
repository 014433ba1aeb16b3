// One host's link slowed to a tenth of the others': three test hosts
// (the server; worker 0 behind the slow link; worker 1) at 100 Mbit/s,
// worker 0's at 10 Mbit/s. Each mode does what it promises with a slow
// worker, and the server's metrics name it: sync waits for it at every step
// (ps_server_wait_for_rank_seconds_total{rank="0"}: the fast worker's push
// is acknowledged once its step is applied), ssp lets the fast
// worker run ahead by the staleness bound and no further, async leaves it
// behind (ps_server_rank_next_step{rank="0"} below the fast worker's).
// The server is scraped while the fast worker trains; the bound each mode
// promises holds at every scrape, and how far ahead the fast worker gets
// is the largest lead seen (the slow link takes ten times the fast one's
// transfer time, which dwarfs a step's compute). Skips (saying why) where
// network namespaces cannot be made.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/hosts/host_job.h"
#include "tests/hosts/skip_without_hosts.h"
#include "tests/hosts/test_hosts.h"
#include "update/checkpoint.h"

namespace ps::testing {
namespace {

constexpr int64_t kMbit = 1000 * 1000;
constexpr int64_t kRate = 100 * kMbit;
// Bounds a hang only: nothing is asserted against a time.
constexpr absl::Duration kTimeout = absl::Seconds(300);
constexpr int kServerHost = 0;
constexpr int kSlowRank = 0;
constexpr int kFastRank = 1;
constexpr int kWorkerHost[] = {1, 2};
constexpr int kSteps = 20;
constexpr int kBatch = 32;
constexpr int kStaleness = 2;
// 50,890 weights, 200 KB a push or a pull: the slow link's 10 Mbit/s takes
// a tenth of a second or more each way, far more than a step's compute.
constexpr char kModel[] = "784-64-10";

// What the server's metrics said while the fast worker trained, and how
// the job ended.
struct Seen {
  // The fast worker's next step minus the slow one's, at each scrape.
  std::vector<double> leads;
  // At the last scrape: seconds pulls and pushes had waited for each rank
  // (0 where there is no series).
  double waited_for_slow = 0;
  double waited_for_fast = 0;
  update::ShardCheckpoint last;

  double max_lead() const {
    return leads.empty() ? 0 : *std::max_element(leads.begin(), leads.end());
  }
};

class SlowLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_TEST_HOSTS();
    absl::StatusOr<std::unique_ptr<TestHosts>> made =
        TestHosts::Create(3, kRate);
    ASSERT_TRUE(made.ok()) << made.status();
    hosts_ = *std::move(made);
    ASSERT_TRUE(hosts_->SetRate(kWorkerHost[kSlowRank], kRate / 10).ok());
  }

  void RunJob(const std::string& mode, Seen* seen) {
    std::vector<std::string> server_flags = {
        absl::StrCat("--mode=", mode), "--optimizer=sgd",
        "--learning_rate=0.05",        "--slow_wait_log=2s",
        "--checkpoint_every_steps=0",  "--checkpoint_every_seconds=0"};
    if (mode == "ssp") {
      server_flags.push_back(absl::StrCat("--staleness=", kStaleness));
    }
    absl::StatusOr<std::unique_ptr<HostJob>> started =
        HostJob::Start(hosts_.get(), {kServerHost}, 2, server_flags, kTimeout);
    ASSERT_TRUE(started.ok()) << started.status();
    HostJob& job = **started;
    for (int rank : {0, 1}) {
      ASSERT_TRUE(
          job.StartWorker(rank, kWorkerHost[rank],
                          {absl::StrCat("--model=", kModel),
                           absl::StrCat("--batch_size=", kBatch), "--epochs=1",
                           absl::StrCat("--max_steps=", kSteps),
                           absl::StrCat("--mode=", mode), "--log_every=5"})
              .ok());
    }
    // Each scrape reads both ranks' steps at one moment.
    while (!job.worker(kFastRank)->TryWait().has_value()) {
      absl::SleepFor(absl::Milliseconds(20));
      absl::StatusOr<std::string> text = job.ServerMetrics(0);
      if (!text.ok()) continue;  // Not serving yet.
      auto value = [&](const char* name, int rank) {
        return MetricValue(*text, name, {{"rank", absl::StrCat(rank)}});
      };
      const std::optional<double> slow =
          value("ps_server_rank_next_step", kSlowRank);
      const std::optional<double> fast =
          value("ps_server_rank_next_step", kFastRank);
      if (!slow.has_value() || !fast.has_value()) continue;  // No model yet.
      seen->leads.push_back(*fast - *slow);
      seen->waited_for_slow =
          value("ps_server_wait_for_rank_seconds_total", kSlowRank).value_or(0);
      seen->waited_for_fast =
          value("ps_server_wait_for_rank_seconds_total", kFastRank).value_or(0);
    }
    ASSERT_FALSE(seen->leads.empty()) << "never scraped while it trained";
    absl::Status ended = job.Wait(kTimeout);
    ASSERT_TRUE(ended.ok()) << ended;
    absl::StatusOr<update::ShardCheckpoint> last = job.LastCheckpoint(0);
    ASSERT_TRUE(last.ok()) << last.status();
    seen->last = *std::move(last);
    std::printf(
        "%s: the fast worker led the slow one by at most %.0f steps (%zu "
        "scrapes); calls waited %.2f s for the slow worker, %.2f s for the "
        "fast one; final version %llu\n",
        mode.c_str(), seen->max_lead(), seen->leads.size(),
        seen->waited_for_slow, seen->waited_for_fast,
        static_cast<unsigned long long>(seen->last.version));
    // Whatever the mode, each worker's examples counted once.
    ASSERT_EQ(seen->last.examples.size(), 1u) << "one epoch";
    EXPECT_EQ(seen->last.examples.at(0),
              std::vector<uint64_t>(2, uint64_t{kSteps} * kBatch));
  }

  std::unique_ptr<TestHosts> hosts_;
};

TEST_F(SlowLinkTest, SyncWaitsForTheSlowWorker) {
  Seen seen;
  ASSERT_NO_FATAL_FAILURE(RunJob("sync", &seen));
  // In lockstep: a push for step t needs the weights of step t, which need
  // every push for step t - 1.
  EXPECT_LE(seen.max_lead(), 1);
  EXPECT_GT(seen.waited_for_slow, seen.waited_for_fast);
  EXPECT_EQ(seen.last.version, uint64_t{kSteps});
}

TEST_F(SlowLinkTest, SspLetsTheFastWorkerAheadByTheStalenessBound) {
  Seen seen;
  ASSERT_NO_FATAL_FAILURE(RunJob("ssp", &seen));
  // Ahead of lockstep, and no further than a pull for step t allows: every
  // rank past step t - 1 - staleness.
  EXPECT_GT(seen.max_lead(), 1);
  EXPECT_LE(seen.max_lead(), kStaleness + 1);
  EXPECT_GT(seen.waited_for_slow, seen.waited_for_fast);
  EXPECT_EQ(seen.last.version, 2u * kSteps);
}

TEST_F(SlowLinkTest, AsyncLeavesTheSlowWorkerBehind) {
  Seen seen;
  ASSERT_NO_FATAL_FAILURE(RunJob("async", &seen));
  // Further behind than ssp would let it fall.
  EXPECT_GT(seen.max_lead(), kStaleness + 1);
  EXPECT_EQ(seen.waited_for_slow, 0) << "async pulls wait for no one";
  EXPECT_EQ(seen.last.version, 2u * kSteps);
}

}  // namespace
}  // namespace ps::testing
