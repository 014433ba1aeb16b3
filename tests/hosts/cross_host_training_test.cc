// A job of the real server and worker binaries on three test hosts joined by
// 1 Gbit/s links: server 0 alone on host 0, server 1 with worker 0 on host
// 1, worker 1 alone on host 2. A worker reaches a server of another host
// over gRPC only (the same-host socket is not there), and the job trains.
// Which transport served the calls is read from each server's metrics
// (ps_server_local_calls_total: calls over the same-host transport) and the
// links' byte counters, not from log lines.
// Skips (saying why) where network namespaces cannot be made.

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/progress_line.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/hosts/host_job.h"
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

// Each server serves its metrics on its host's loopback (the hosts are
// network namespaces, so one port for all).
constexpr int kMetricsPort = 9400;

// Starts `argv` on `host`; its lines also go to the test log, prefixed.
std::unique_ptr<Subprocess> StartOn(const TestHosts& hosts, int host,
                                    const std::string& name,
                                    std::vector<std::string> argv) {
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      hosts.Start(host, TestProcessOptions(name, std::move(argv)));
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : nullptr;
}

TEST(CrossHostTrainingTest, WorkersReachServersOfOtherHostsOverGrpc) {
  if (const std::string why = TestHosts::WhyUnavailable(); !why.empty()) {
    GTEST_SKIP() << "no test hosts on this machine: " << why;
  }
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(3, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;

  constexpr int kServerHost[] = {0, 1};
  constexpr int kWorkerHost[] = {1, 2};
  std::vector<std::unique_ptr<Subprocess>> servers;
  std::vector<std::string> addresses;
  for (int index : {0, 1}) {
    const int host = kServerHost[index];
    const std::string port_file =
        TempPath(absl::StrCat("server-", index, ".port"));
    std::filesystem::remove(port_file);
    servers.push_back(StartOn(
        hosts, host, absl::StrCat("server ", index),
        {RunfilePath("server/server"), absl::StrCat("--server_index=", index),
         "--num_servers=2", "--num_workers=2",
         absl::StrCat("--host=", hosts.address(host)), "--port=0",
         absl::StrCat("--port_file=", port_file), "--mode=sync",
         "--optimizer=sgd", "--learning_rate=0.05",
         // Workers of other hosts use gRPC, not the frames over TCP
         // (tests/hosts/tcp_frames_hosts_test.cc).
         "--tcp_data_port=-1", absl::StrCat("--metrics_port=", kMetricsPort)}));
    ASSERT_NE(servers.back(), nullptr);
    absl::StatusOr<int> port =
        WaitForPortFile(port_file, kTimeout, servers.back().get());
    ASSERT_TRUE(port.ok()) << port.status();
    addresses.push_back(absl::StrCat(hosts.address(host), ":", *port));
  }

  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int rank : {0, 1}) {
    workers.push_back(
        StartOn(hosts, kWorkerHost[rank], absl::StrCat("worker ", rank),
                {RunfilePath("worker/worker"), absl::StrCat("--rank=", rank),
                 "--num_workers=2",
                 absl::StrCat("--servers=", absl::StrJoin(addresses, ",")),
                 "--batch_size=32", "--epochs=1", "--max_steps=40",
                 "--device=cpu", "--mode=sync", "--log_every=20",
                 // Keeps the servers up for a while: they are scraped
                 // while they serve, and exit when the workers are done.
                 "--slowdown_ms=50"}));
    ASSERT_NE(workers.back(), nullptr);
  }
  // Until both workers are done: the most calls each server has served
  // over its same-host transport, and whether it was scraped at all.
  double local_calls[2] = {-1, -1};
  const absl::Time deadline = absl::Now() + kTimeout;
  while ((!workers[0]->WaitFor(absl::Milliseconds(20)).has_value() ||
          !workers[1]->WaitFor(absl::ZeroDuration()).has_value()) &&
         absl::Now() < deadline) {
    for (int index : {0, 1}) {
      absl::StatusOr<std::string> text = hosts.HttpGet(
          kServerHost[index], kMetricsPort, "/metrics", absl::Seconds(5));
      if (!text.ok()) continue;  // Not serving yet, or done.
      const std::optional<double> calls =
          MetricValue(*text, "ps_server_local_calls_total");
      if (calls.has_value()) {
        local_calls[index] = std::max(local_calls[index], *calls);
      }
    }
  }
  for (int rank : {0, 1}) {
    const std::optional<ExitStatus> exit = workers[rank]->WaitFor(kTimeout);
    ASSERT_TRUE(exit.has_value()) << "worker " << rank << " still runs";
    ASSERT_TRUE(exit->success()) << "worker " << rank << " " << exit->ToString()
                                 << ": " << workers[rank]->LastLines(20);
  }

  // It trained: well above chance (0.1) after 40 steps.
  const std::optional<FinalAccuracy> accuracy =
      LastProgressOf<FinalAccuracy>(workers[0]->OutputLines());
  ASSERT_TRUE(accuracy.has_value()) << workers[0]->LastLines(10);
  EXPECT_GT(accuracy->accuracy, 0.3);

  // Across hosts the same-host endpoint a server announces cannot be
  // reached: server 0, alone on its host, served no call over it (every
  // call came over gRPC); server 1 served worker 0, beside it, over it.
  EXPECT_EQ(local_calls[0], 0) << "server 0 was never scraped (-1), or a "
                                  "worker of another host reached its "
                                  "same-host transport";
  EXPECT_GT(local_calls[1], 0) << "worker 0 did not use the same-host "
                                  "transport of server 1, on its own host";

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
