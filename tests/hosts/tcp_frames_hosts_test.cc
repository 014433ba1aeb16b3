// A job of the real server and worker binaries on three test hosts joined by
// 1 Gbit/s links: server 0 alone on host 0, server 1 with worker 0 on host
// 1, worker 1 alone on host 2. A worker reaches a server of another host
// through the frames over TCP that the server announces (its
// --tcp_data_port), and a server of its own host through the Unix socket;
// the job trains to the same weights as when every worker reaches the
// servers of other hosts over gRPC (sync is deterministic: rank 0's saved
// model, bit for bit). Which route served the calls is read from each
// server's metrics (ps_server_tcp_frame_calls_total,
// ps_server_local_calls_total), not from log lines. A frames port that a
// firewall drops costs the workers a wait (the client's connect timeout),
// then gRPC, not the job. Skips (saying why) where network namespaces
// cannot be made.

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/tcp_frames.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/hosts/host_job.h"
#include "tests/hosts/skip_without_hosts.h"
#include "tests/hosts/test_hosts.h"

namespace ps::testing {
namespace {

constexpr int64_t kGbit = 1000 * 1000 * 1000;
// Bounds a hang only: the job takes seconds.
constexpr absl::Duration kTimeout = absl::Seconds(300);
constexpr int kServerHost[] = {0, 1};
constexpr int kWorkerHost[] = {1, 2};

struct JobResult {
  // The most calls each server served over each route while the workers
  // ran (ps_server_tcp_frame_calls_total, ps_server_local_calls_total).
  MetricPeaks routes{
      {"ps_server_tcp_frame_calls_total", "ps_server_local_calls_total"}};
  // The final model, as rank 0 saved it (--save_model).
  std::string model;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs the job with the servers' --tcp_data_port at `tcp_data_port`
// (nullopt: the default); `before_workers` (if any) runs once the servers
// listen.
void RunJob(const TestHosts& hosts, std::optional<int> tcp_data_port,
            JobResult* result,
            const std::function<void(HostJob&)>& before_workers = nullptr) {
  const std::string model_file = TempPath(absl::StrCat(
      "tcp-frames-model-", tcp_data_port.value_or(-2) + 2, ".bin"));
  std::filesystem::remove(model_file);
  std::vector<std::string> server_flags = {"--mode=sync", "--optimizer=sgd",
                                           "--learning_rate=0.05"};
  if (tcp_data_port.has_value()) {
    server_flags.push_back(absl::StrCat("--tcp_data_port=", *tcp_data_port));
  }
  absl::StatusOr<std::unique_ptr<HostJob>> started =
      HostJob::Start(&hosts, {kServerHost[0], kServerHost[1]}, 2,
                     std::move(server_flags), kTimeout);
  ASSERT_TRUE(started.ok()) << started.status();
  HostJob& job = **started;
  if (before_workers) {
    ASSERT_NO_FATAL_FAILURE(before_workers(job));
  }
  for (int rank : {0, 1}) {
    std::vector<std::string> flags = {
        "--batch_size=32", "--epochs=1", "--max_steps=40", "--mode=sync",
        "--log_every=20",
        // Keeps the servers up for a while: they are scraped while they
        // serve, and exit when the workers are done.
        "--slowdown_ms=50"};
    if (rank == 0) flags.push_back(absl::StrCat("--save_model=", model_file));
    ASSERT_TRUE(job.StartWorker(rank, kWorkerHost[rank], flags).ok());
  }
  const absl::Status watched =
      job.WatchServersWhileWorkersRun(&result->routes, kTimeout);
  ASSERT_TRUE(watched.ok()) << watched;
  const absl::Status ended = job.Wait(kTimeout);
  ASSERT_TRUE(ended.ok()) << ended;
  result->model = ReadFile(model_file);
  ASSERT_FALSE(result->model.empty()) << "rank 0 saved no model";
}

TEST(TcpFramesHostsTest, WorkersOfOtherHostsUseTcpFramesAndTrainAsOverGrpc) {
  SKIP_WITHOUT_TEST_HOSTS();
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(3, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;

  JobResult tcp;
  // The servers' default: frames over TCP at a free port.
  ASSERT_NO_FATAL_FAILURE(RunJob(hosts, std::nullopt, &tcp));
  // Server 0, alone on its host, served its workers over TCP only; server
  // 1 served worker 1 (host 2) over TCP and worker 0, beside it, over the
  // Unix socket.
  const MetricPeaks& routes = tcp.routes;
  EXPECT_GT(routes.Peak("ps_server_tcp_frame_calls_total", 0), 0)
      << "no worker reached server 0 over its TCP data port (nullopt: never "
         "scraped)";
  EXPECT_EQ(routes.Peak("ps_server_local_calls_total", 0), 0)
      << "a worker of another host reached server 0's Unix socket";
  EXPECT_GT(routes.Peak("ps_server_tcp_frame_calls_total", 1), 0)
      << "worker 1 did not reach server 1 over TCP";
  EXPECT_GT(routes.Peak("ps_server_local_calls_total", 1), 0)
      << "worker 0 did not use server 1's Unix socket, on its own host";

  JobResult grpc;
  ASSERT_NO_FATAL_FAILURE(RunJob(hosts, /*tcp_data_port=*/-1, &grpc));
  EXPECT_EQ(grpc.routes.Peak("ps_server_tcp_frame_calls_total", 0), 0)
      << "TCP frames served though off";
  // Sync training sums in rank order whatever carries the bytes: the same
  // model, bit for bit.
  EXPECT_TRUE(tcp.model == grpc.model)
      << "the models differ (" << tcp.model.size() << " and "
      << grpc.model.size() << " bytes)";
}

// Servers at a fixed frames port that a firewall on their hosts drops
// (every packet to it vanishes: connecting times out, as behind a real
// firewall, rather than being refused): each worker waits out its connect
// timeout once per shard, warns, and the job runs over gRPC to the same
// model.
TEST(TcpFramesHostsTest, AFirewalledFramesPortCostsAWaitNotTheJob) {
  SKIP_WITHOUT_TEST_HOSTS();
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(3, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;

  JobResult grpc;
  ASSERT_NO_FATAL_FAILURE(RunJob(hosts, /*tcp_data_port=*/-1, &grpc));

  constexpr int kFramesPort = 7002;
  for (int host : kServerHost) {
    ASSERT_TRUE(hosts.DropTcpTo(host, kFramesPort).ok());
  }
  JobResult firewalled;
  ASSERT_NO_FATAL_FAILURE(
      RunJob(hosts, kFramesPort, &firewalled, [&](HostJob& job) {
        // The servers do serve frames there (seen from their own host,
        // whose loopback the firewall does not cover): the port is not
        // missing, it is dropped.
        for (int index : {0, 1}) {
          const int host = job.server_host(index);
          absl::Status reached;
          ASSERT_TRUE(hosts
                          .RunInHost(host,
                                     [&] {
                                       reached =
                                           ConnectTcpFrames(hosts.address(host),
                                                            kFramesPort,
                                                            absl::Seconds(30))
                                               .status();
                                     })
                          .ok());
          // Over lo: not dropped.
          EXPECT_TRUE(reached.ok()) << "server " << index << ": " << reached;
        }
      }));
  const MetricPeaks& routes = firewalled.routes;
  for (int index : {0, 1}) {
    EXPECT_EQ(routes.Peak("ps_server_tcp_frame_calls_total", index), 0)
        << "server " << index
        << " served calls over its firewalled frames port (nullopt: never "
           "scraped)";
  }
  EXPECT_GT(routes.Peak("ps_server_local_calls_total", 1), 0)
      << "worker 0 did not use server 1's Unix socket, on its own host";
  EXPECT_TRUE(firewalled.model == grpc.model)
      << "the models differ (" << firewalled.model.size() << " and "
      << grpc.model.size() << " bytes)";
}

}  // namespace
}  // namespace ps::testing
