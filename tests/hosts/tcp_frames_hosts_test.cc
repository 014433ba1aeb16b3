// A job of the real server and worker binaries on three test hosts joined by
// 1 Gbit/s links: server 0 alone on host 0, server 1 with worker 0 on host
// 1, worker 1 alone on host 2. A worker reaches a server of another host
// through the frames over TCP that the server announces (its
// --tcp_data_port), and a server of its own host through the Unix socket;
// the job trains to the same weights as when every worker reaches the
// servers of other hosts over gRPC (sync is deterministic: rank 0's saved
// model, bit for bit). Which route served the calls is read from each
// server's metrics (ps_server_tcp_frame_calls_total,
// ps_server_local_calls_total), not from log lines. Skips (saying why)
// where network namespaces cannot be made.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
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
// Each server serves its metrics on its host's loopback (the hosts are
// network namespaces, so one port for all).
constexpr int kMetricsPort = 9401;
constexpr int kServerHost[] = {0, 1};
constexpr int kWorkerHost[] = {1, 2};

// The most calls each server served over each route while the job ran; -1:
// never scraped.
struct Routes {
  double tcp_calls[2] = {-1, -1};
  double local_calls[2] = {-1, -1};
};

struct JobResult {
  Routes routes;
  // The final model, as rank 0 saved it (--save_model).
  std::string model;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::unique_ptr<Subprocess> StartOn(const TestHosts& hosts, int host,
                                    const std::string& name,
                                    std::vector<std::string> argv) {
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      hosts.Start(host, TestProcessOptions(name, std::move(argv)));
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : nullptr;
}

// Runs the job with the servers' --tcp_data_port at `tcp_data_port`.
void RunJob(const TestHosts& hosts, int tcp_data_port, JobResult* result) {
  const std::string model_file =
      TempPath(absl::StrCat("tcp-frames-model-", tcp_data_port, ".bin"));
  std::filesystem::remove(model_file);
  std::vector<std::unique_ptr<Subprocess>> servers;
  std::vector<std::string> addresses;
  for (int index : {0, 1}) {
    const int host = kServerHost[index];
    const std::string port_file =
        TempPath(absl::StrCat("tcp-frames-server-", index, ".port"));
    std::filesystem::remove(port_file);
    servers.push_back(StartOn(
        hosts, host, absl::StrCat("server ", index),
        {RunfilePath("server/server"), absl::StrCat("--server_index=", index),
         "--num_servers=2", "--num_workers=2",
         absl::StrCat("--host=", hosts.address(host)), "--port=0",
         absl::StrCat("--port_file=", port_file), "--mode=sync",
         "--optimizer=sgd", "--learning_rate=0.05",
         absl::StrCat("--tcp_data_port=", tcp_data_port),
         absl::StrCat("--metrics_port=", kMetricsPort)}));
    ASSERT_NE(servers.back(), nullptr);
    absl::StatusOr<int> port =
        WaitForPortFile(port_file, kTimeout, servers.back().get());
    ASSERT_TRUE(port.ok()) << port.status();
    addresses.push_back(absl::StrCat(hosts.address(host), ":", *port));
  }
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int rank : {0, 1}) {
    std::vector<std::string> argv = {
        RunfilePath("worker/worker"), absl::StrCat("--rank=", rank),
        "--num_workers=2",
        absl::StrCat("--servers=", absl::StrJoin(addresses, ",")),
        "--batch_size=32", "--epochs=1", "--max_steps=40", "--device=cpu",
        "--mode=sync", "--log_every=20",
        // Keeps the servers up for a while: they are scraped while they
        // serve, and exit when the workers are done.
        "--slowdown_ms=50"};
    if (rank == 0) argv.push_back(absl::StrCat("--save_model=", model_file));
    workers.push_back(StartOn(hosts, kWorkerHost[rank],
                              absl::StrCat("worker ", rank), std::move(argv)));
    ASSERT_NE(workers.back(), nullptr);
  }
  const absl::Time deadline = absl::Now() + kTimeout;
  while ((!workers[0]->WaitFor(absl::Milliseconds(20)).has_value() ||
          !workers[1]->WaitFor(absl::ZeroDuration()).has_value()) &&
         absl::Now() < deadline) {
    for (int index : {0, 1}) {
      absl::StatusOr<std::string> text = hosts.HttpGet(
          kServerHost[index], kMetricsPort, "/metrics", absl::Seconds(5));
      if (!text.ok()) continue;  // Not serving yet, or done.
      if (std::optional<double> calls =
              MetricValue(*text, "ps_server_tcp_frame_calls_total")) {
        result->routes.tcp_calls[index] =
            std::max(result->routes.tcp_calls[index], *calls);
      }
      if (std::optional<double> calls =
              MetricValue(*text, "ps_server_local_calls_total")) {
        result->routes.local_calls[index] =
            std::max(result->routes.local_calls[index], *calls);
      }
    }
  }
  for (int rank : {0, 1}) {
    const std::optional<ExitStatus> exit = workers[rank]->WaitFor(kTimeout);
    ASSERT_TRUE(exit.has_value()) << "worker " << rank << " still runs";
    ASSERT_TRUE(exit->success()) << "worker " << rank << " " << exit->ToString()
                                 << ": " << workers[rank]->LastLines(20);
  }
  result->model = ReadFile(model_file);
  ASSERT_FALSE(result->model.empty()) << "rank 0 saved no model";
  for (const std::unique_ptr<Subprocess>& server : servers) {
    ASSERT_TRUE(server->WaitFor(kTimeout).has_value());
  }
}

TEST(TcpFramesHostsTest, WorkersOfOtherHostsUseTcpFramesAndTrainAsOverGrpc) {
  if (const std::string why = TestHosts::WhyUnavailable(); !why.empty()) {
    GTEST_SKIP() << "no test hosts on this machine: " << why;
  }
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(3, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;

  JobResult tcp;
  ASSERT_NO_FATAL_FAILURE(RunJob(hosts, /*tcp_data_port=*/0, &tcp));
  // Server 0, alone on its host, served its workers over TCP only; server
  // 1 served worker 1 (host 2) over TCP and worker 0, beside it, over the
  // Unix socket.
  EXPECT_GT(tcp.routes.tcp_calls[0], 0)
      << "no worker reached server 0 over its TCP data port (-1: never "
         "scraped)";
  EXPECT_EQ(tcp.routes.local_calls[0], 0)
      << "a worker of another host reached server 0's Unix socket";
  EXPECT_GT(tcp.routes.tcp_calls[1], 0)
      << "worker 1 did not reach server 1 over TCP";
  EXPECT_GT(tcp.routes.local_calls[1], 0)
      << "worker 0 did not use server 1's Unix socket, on its own host";

  JobResult grpc;
  ASSERT_NO_FATAL_FAILURE(RunJob(hosts, /*tcp_data_port=*/-1, &grpc));
  EXPECT_EQ(grpc.routes.tcp_calls[0], 0) << "TCP frames served though off";
  // Sync training sums in rank order whatever carries the bytes: the same
  // model, bit for bit.
  EXPECT_TRUE(tcp.model == grpc.model)
      << "the models differ (" << tcp.model.size() << " and "
      << grpc.model.size() << " bytes)";
}

}  // namespace
}  // namespace ps::testing
