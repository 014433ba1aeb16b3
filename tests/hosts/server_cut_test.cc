// A server's host cut off from the network in the middle of training, then
// plugged back in: four test hosts (server 0, server 1, worker 0, worker 1,
// one each) joined by 1 Gbit/s links, and server 0's link down for longer
// than the shards' --worker_timeout. The workers wait for it; the cut-off
// shard, hearing from no worker at all, declares none of them dead (it is
// the one cut off); and nothing is lost: a sync job ends bit for bit as the
// same job undisturbed, and an async one as accurate as it usually is.
// Skips (saying why) where network namespaces cannot be made.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/hosts/host_job.h"
#include "tests/hosts/test_hosts.h"
#include "update/checkpoint.h"

namespace ps::testing {
namespace {

constexpr int64_t kGbit = 1000 * 1000 * 1000;
// Bounds a hang only: nothing is asserted against a time.
constexpr absl::Duration kTimeout = absl::Seconds(300);
constexpr int kSteps = 100;
// Short, so that the cut lasts several of it; the workers' heartbeats (every
// second) keep them alive well within it.
constexpr char kWorkerTimeout[] = "--worker_timeout=3s";
constexpr int kServerHost[] = {0, 1};
constexpr int kWorkerHost[] = {2, 3};
constexpr int kCutShard = 0;
// The shard's version when its host is cut off: well inside the job.
constexpr double kCutAtVersion = 10;

struct Outcome {
  std::vector<update::ShardCheckpoint> shards;  // Each one's final checkpoint.
  double accuracy = 0;
};

// What a job whose server `kCutShard`'s link is cut does to it.
enum class Fault { kNone, kCutServer };

void RunJob(const TestHosts& hosts, const std::string& mode, Fault fault,
            Outcome* outcome) {
  absl::StatusOr<std::unique_ptr<HostJob>> job = HostJob::Start(
      &hosts, {kServerHost[0], kServerHost[1]}, 2,
      {absl::StrCat("--mode=", mode), "--optimizer=sgd", "--learning_rate=0.05",
       kWorkerTimeout, "--slow_wait_log=2s", "--checkpoint_every_steps=0",
       "--checkpoint_every_seconds=0"},
      kTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string model_file =
      TempPath(absl::StrCat("server_cut_", mode, "_", fault, ".model"));
  for (int rank : {0, 1}) {
    std::vector<std::string> flags = {
        "--batch_size=32", "--epochs=1", absl::StrCat("--max_steps=", kSteps),
        absl::StrCat("--mode=", mode), "--log_every=20",
        // Long enough that the cut lands in the middle of the job.
        "--slowdown_ms=20"};
    if (rank == 0) flags.push_back(absl::StrCat("--save_model=", model_file));
    ASSERT_TRUE((*job)->StartWorker(rank, kWorkerHost[rank], flags).ok());
  }
  auto version = [&]() -> absl::StatusOr<double> {
    absl::StatusOr<std::string> text = (*job)->ServerMetrics(kCutShard);
    if (!text.ok()) return text.status();
    std::optional<double> v = MetricValue(*text, "ps_server_version");
    if (!v.has_value()) return absl::NotFoundError("no ps_server_version yet");
    return *v;
  };
  if (fault == Fault::kCutServer) {
    ASSERT_TRUE(AwaitValue(
                    "the shard's version", version,
                    [](double v) { return v >= kCutAtVersion; }, kTimeout)
                    .ok());
    const int host = (*job)->server_host(kCutShard);
    ASSERT_TRUE(hosts.SetLinkDown(host).ok());
    absl::StatusOr<double> at_cut = version();
    ASSERT_TRUE(at_cut.ok()) << at_cut.status();
    ASSERT_LT(*at_cut, kSteps) << "the job ended before its server was cut";
    absl::SleepFor(absl::Seconds(10));
    absl::StatusOr<std::string> text = (*job)->ServerMetrics(kCutShard);
    ASSERT_TRUE(text.ok()) << text.status();
    ASSERT_TRUE(hosts.SetLinkUp(host).ok());
  }
  ASSERT_TRUE((*job)->Wait(kTimeout).ok());
  for (int index : {0, 1}) {
    absl::StatusOr<update::ShardCheckpoint> last =
        (*job)->LastCheckpoint(index);
    ASSERT_TRUE(last.ok()) << last.status();
    outcome->shards.push_back(*std::move(last));
  }
  absl::StatusOr<double> accuracy = TestAccuracy(model_file, "784-256-128-10");
  ASSERT_TRUE(accuracy.ok()) << accuracy.status();
  outcome->accuracy = *accuracy;
}

class ServerCutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = TestHosts::WhyUnavailable(); !why.empty()) {
      GTEST_SKIP() << "no test hosts on this machine: " << why;
    }
    absl::StatusOr<std::unique_ptr<TestHosts>> made =
        TestHosts::Create(4, kGbit);
    ASSERT_TRUE(made.ok()) << made.status();
    hosts_ = *std::move(made);
  }

  std::unique_ptr<TestHosts> hosts_;
};

TEST_F(ServerCutTest, SyncEndsBitIdenticalToTheJobUndisturbed) {
  Outcome undisturbed, cut;
  ASSERT_NO_FATAL_FAILURE(RunJob(*hosts_, "sync", Fault::kNone, &undisturbed));
  ASSERT_NO_FATAL_FAILURE(RunJob(*hosts_, "sync", Fault::kCutServer, &cut));
  std::printf("accuracy: %.4f undisturbed, %.4f cut\n", undisturbed.accuracy,
              cut.accuracy);
  for (int index : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "shard " << index);
    EXPECT_EQ(cut.shards[index].version, undisturbed.shards[index].version);
    EXPECT_EQ(CompareWeights(cut.shards[index], undisturbed.shards[index]),
              "");
    EXPECT_EQ(cut.shards[index].examples, undisturbed.shards[index].examples);
  }
  EXPECT_EQ(cut.accuracy, undisturbed.accuracy);
}

}  // namespace
}  // namespace ps::testing
