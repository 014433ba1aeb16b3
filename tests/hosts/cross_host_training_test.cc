// A job of the real server and worker binaries on three test hosts joined by
// 1 Gbit/s links: server 0 alone on host 0, server 1 with worker 0 on host
// 1, worker 1 alone on host 2. A worker reaches a server of another host
// over gRPC only (the same-host socket is not there), and the job trains.
// Which transport served the calls is read from each server's metrics
// (ps_server_local_calls_total: calls over the same-host transport) and the
// links' byte counters, not from log lines.
// Skips (saying why) where network namespaces cannot be made.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/progress_line.h"
#include "gtest/gtest.h"
#include "tests/hosts/host_job.h"
#include "tests/hosts/skip_without_hosts.h"
#include "tests/hosts/test_hosts.h"

namespace ps::testing {
namespace {

constexpr int64_t kGbit = 1000 * 1000 * 1000;
// Bounds a hang only: the job takes seconds.
constexpr absl::Duration kTimeout = absl::Seconds(300);
// The default model, 784-256-128-10, in float32: what one pull or push of
// the whole model moves, at the least.
constexpr int64_t kModelBytes =
    4 * ((784 * 256 + 256) + (256 * 128 + 128) + (128 * 10 + 10));

constexpr int kServerHost[] = {0, 1};
constexpr int kWorkerHost[] = {1, 2};

TEST(CrossHostTrainingTest, WorkersReachServersOfOtherHostsOverGrpc) {
  SKIP_WITHOUT_TEST_HOSTS();
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(3, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;

  absl::StatusOr<std::unique_ptr<HostJob>> started =
      HostJob::Start(&hosts, {kServerHost[0], kServerHost[1]}, 2,
                     {"--mode=sync", "--optimizer=sgd", "--learning_rate=0.05",
                      // Workers of other hosts use gRPC, not the frames over
                      // TCP (tests/hosts/tcp_frames_hosts_test.cc).
                      "--tcp_data_port=-1"},
                     kTimeout);
  ASSERT_TRUE(started.ok()) << started.status();
  HostJob& job = **started;
  for (int rank : {0, 1}) {
    ASSERT_TRUE(
        job.StartWorker(rank, kWorkerHost[rank],
                        {"--batch_size=32", "--epochs=1", "--max_steps=40",
                         "--mode=sync", "--log_every=20",
                         // Keeps the servers up for a while: they are
                         // scraped while they serve, and exit when the
                         // workers are done.
                         "--slowdown_ms=50"})
            .ok());
  }
  // The most calls each server served over its same-host transport while
  // the workers ran.
  MetricPeaks peaks({"ps_server_local_calls_total"});
  const absl::Status watched =
      job.WatchServersWhileWorkersRun(&peaks, kTimeout);
  ASSERT_TRUE(watched.ok()) << watched;
  const absl::Status ended = job.Wait(kTimeout);
  ASSERT_TRUE(ended.ok()) << ended;

  // It trained: well above chance (0.1) after 40 steps.
  const std::optional<FinalAccuracy> accuracy =
      LastProgressOf<FinalAccuracy>(job.worker(0)->OutputLines());
  ASSERT_TRUE(accuracy.has_value()) << job.worker(0)->LastLines(10);
  EXPECT_GT(accuracy->accuracy, 0.3);

  // Across hosts the same-host endpoint a server announces cannot be
  // reached: server 0, alone on its host, served no call over it (every
  // call came over gRPC); server 1 served worker 0, beside it, over it.
  EXPECT_EQ(peaks.Peak("ps_server_local_calls_total", 0), 0)
      << "server 0 was never scraped (nullopt), or a worker of another host "
         "reached its same-host transport";
  EXPECT_GT(peaks.Peak("ps_server_local_calls_total", 1), 0)
      << "worker 0 did not use the same-host transport of server 1, on its "
         "own host";

  // Worker 1's weights and gradients crossed its link: at least one whole
  // model each way.
  absl::StatusOr<TestHosts::LinkBytes> bytes = hosts.Bytes(2);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_GE(bytes->sent, kModelBytes);
  EXPECT_GE(bytes->received, kModelBytes);
  // Server 0's part of the model crossed its link to both workers.
  absl::StatusOr<TestHosts::LinkBytes> server0 = hosts.Bytes(0);
  ASSERT_TRUE(server0.ok()) << server0.status();
  EXPECT_GT(server0->sent, 0);
  EXPECT_GT(server0->received, 0);
}

}  // namespace
}  // namespace ps::testing
