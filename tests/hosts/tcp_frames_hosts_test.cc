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

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
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

// Runs the job with the servers' --tcp_data_port at `tcp_data_port`.
void RunJob(const TestHosts& hosts, int tcp_data_port, JobResult* result) {
  const std::string model_file =
      TempPath(absl::StrCat("tcp-frames-model-", tcp_data_port, ".bin"));
  std::filesystem::remove(model_file);
  absl::StatusOr<std::unique_ptr<HostJob>> started =
      HostJob::Start(&hosts, {kServerHost[0], kServerHost[1]}, 2,
                     {"--mode=sync", "--optimizer=sgd", "--learning_rate=0.05",
                      absl::StrCat("--tcp_data_port=", tcp_data_port)},
                     kTimeout);
  ASSERT_TRUE(started.ok()) << started.status();
  HostJob& job = **started;
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
  ASSERT_NO_FATAL_FAILURE(RunJob(hosts, /*tcp_data_port=*/0, &tcp));
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

}  // namespace
}  // namespace ps::testing
