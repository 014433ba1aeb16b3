// A link that drops in the middle of a push: a worker (exact_push_program:
// plain SGD at 1/8, a gradient of 1 in every element, so that after n
// applied steps every weight is exactly -n/8) pushes 8 MB a step to a
// server over a 16 Mbit/s link, which is cut when a quarter of the second
// push has left the worker's host, until the server has dropped the stalled
// push (--stream_idle_timeout), then plugged back in. The push is all or
// nothing (the server refuses the part it got), the worker sends it again,
// and it is applied once: the version is the number of steps and every
// weight is exact. In sync mode the push travels as frames over TCP (the
// server's default), in async mode over gRPC (--tcp_data_port=-1); each
// checks its route on the server's metrics
// (ps_server_tcp_frame_calls_total). Skips (saying why) where network
// namespaces cannot be made.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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
// Bounds a hang only: nothing is asserted against a time.
constexpr absl::Duration kTimeout = absl::Seconds(300);
constexpr int kServerHost = 0;
constexpr int kWorkerHost = 1;
constexpr int kSteps = 3;
// 8 MB a push: 4 s at 16 Mbit/s, so the cut lands mid-push even when this
// test runs 3 s late on a loaded machine.
constexpr int64_t kElements = 2 * 1000 * 1000;
constexpr int64_t kPushBytes = 4 * kElements;

// What carries the push: the server's default (frames over TCP), or gRPC.
enum class Route { kFrames, kGrpc };

void CutAPushInTheMiddle(const std::string& mode, Route route) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made =
      TestHosts::Create(2, 16 * kMbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;
  std::vector<std::string> server_flags = {
      absl::StrCat("--mode=", mode), "--stream_idle_timeout=1s",
      "--worker_timeout=5s", "--checkpoint_every_steps=0",
      "--checkpoint_every_seconds=0"};
  if (route == Route::kGrpc) server_flags.push_back("--tcp_data_port=-1");
  absl::StatusOr<std::unique_ptr<HostJob>> started = HostJob::Start(
      &hosts, {kServerHost}, 1, std::move(server_flags), kTimeout);
  ASSERT_TRUE(started.ok()) << started.status();
  HostJob& job = **started;
  ASSERT_TRUE(job.StartProgram(0, kWorkerHost,
                               {RunfilePath("tests/hosts/exact_push_program"),
                                absl::StrCat("--steps=", kSteps),
                                absl::StrCat("--elements=", kElements)})
                  .ok());

  // A quarter of the second push: the first whole, and a quarter again (what
  // else the host sends, acknowledgements of the pulled weights, is small).
  ASSERT_TRUE(
      hosts.AwaitSent(kWorkerHost, kPushBytes + kPushBytes / 4, kTimeout).ok());
  // The first step went the route asked for.
  absl::StatusOr<double> frame_calls =
      job.ServerMetric(0, "ps_server_tcp_frame_calls_total");
  ASSERT_TRUE(frame_calls.ok()) << frame_calls.status();
  if (route == Route::kFrames) {
    EXPECT_GT(*frame_calls, 0) << "the push did not travel as TCP frames";
  } else {
    EXPECT_EQ(*frame_calls, 0) << "TCP frames served though off";
  }
  ASSERT_TRUE(hosts.SetLinkDown(kWorkerHost).ok());
  // The shard drops the stalled push and refuses the part it got.
  absl::Status dropped = AwaitValue(
      "a push refused as incomplete",
      [&] {
        return job.ServerMetric(
            0, "ps_server_refused_total",
            {{"call", "push"}, {"reason", "invalid_argument"}});
      },
      [](double v) { return v >= 1; }, kTimeout);
  EXPECT_TRUE(dropped.ok()) << dropped;
  absl::StatusOr<double> version = job.ServerMetric(0, "ps_server_version");
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 1) << "the second push is not applied";
  ASSERT_TRUE(hosts.SetLinkUp(kWorkerHost).ok());

  // The worker checked the weights after every step; it exits 0 only if
  // each was exact.
  absl::Status ended = job.Wait(kTimeout);
  ASSERT_TRUE(ended.ok()) << ended;
  absl::StatusOr<update::ShardCheckpoint> last = job.LastCheckpoint(0);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->version, uint64_t{kSteps});
  const float expected = -0.125f * kSteps;
  int64_t exact = 0;
  for (const update::SliceSnapshot& slice : last->slices) {
    for (float w : slice.weights) exact += w == expected ? 1 : 0;
  }
  EXPECT_EQ(exact, kElements) << "weights that are not " << expected;
  ASSERT_EQ(last->examples.size(), 1u);
  EXPECT_EQ(last->examples.at(0), std::vector<uint64_t>{kSteps});
}

TEST(PushDropTest, APushCutInTheMiddleIsAppliedOnce) {
  SKIP_WITHOUT_TEST_HOSTS();
  CutAPushInTheMiddle("sync", Route::kFrames);
}

TEST(PushDropTest, AnAsyncPushCutInTheMiddleOverGrpcIsAppliedOnce) {
  SKIP_WITHOUT_TEST_HOSTS();
  CutAPushInTheMiddle("async", Route::kGrpc);
}

}  // namespace
}  // namespace ps::testing
