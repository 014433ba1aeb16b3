// Runs the real `server` binary as a child process: its Prometheus
// endpoint.
#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/http_testing.h"
#include "gtest/gtest.h"
#include "server/server_binary_testing.h"
#include "server/shard_report.h"

namespace ps::server::testing {
namespace {

TEST(ServerBinaryTest, ServesMetricsCountingPushesAndCheckpoints) {
  const std::string dir = FreshTempPath("metrics_ckpt");
  const std::string port_file = TempPath("metrics.port");
  const std::string log = TempPath("metrics.log");
  const std::string report = TempPath("metrics.report");
  std::remove(port_file.c_str());
  std::remove(report.c_str());
  absl::StatusOr<int> metrics_port = ps::testing::UnusedLoopbackPort();
  ASSERT_TRUE(metrics_port.ok()) << metrics_port.status();
  pid_t pid = Spawn(
      {"--server_index=0", "--mode=async",
       absl::StrCat("--checkpoint_dir=", dir), "--checkpoint_every_steps=1",
       absl::StrCat("--metrics_port=", *metrics_port),
       absl::StrCat("--port_file=", port_file),
       absl::StrCat("--report_file=", report)},
      log);
  ChildGuard guard{pid};
  const int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadTestFile(log);
  EXPECT_NE(ReadTestFile(log).find(absl::StrCat("serving metrics on http://"
                                                "127.0.0.1:",
                                                *metrics_port, "/metrics")),
            std::string::npos)
      << ReadTestFile(log);

  ShardClient client(port);
  EXPECT_EQ(client.Push(0).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(client.Declare().ok());
  for (uint64_t step : {0, 1}) ASSERT_TRUE(client.Push(step).ok());
  // The checkpoint of version 2 is written in the background.
  absl::StatusOr<std::string> text;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    text = ps::testing::HttpGet(*metrics_port, "/metrics");
    ASSERT_TRUE(text.ok()) << text.status();
    if (text->find("ps_server_checkpoint_version{shard=\"0\"} 2\n") !=
        std::string::npos) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < deadline);
  for (const char* line :
       {"ps_server_push_total{shard=\"0\"} 2\n",
        "ps_server_push_duration_seconds_count{shard=\"0\"} 2\n",
        // 8-4-2: 46 floats.
        "ps_server_push_bytes_total{shard=\"0\"} 368\n",
        "ps_server_refused_total{call=\"push\",reason=\"failed_precondition\","
        "shard=\"0\"} 1\n",
        "ps_server_version{shard=\"0\"} 2\n",
        "ps_server_staleness_updates_count{shard=\"0\"} 2\n",
        "ps_server_checkpoint_version{shard=\"0\"} 2\n",
        "ps_server_restored{shard=\"0\"} 0\n",
        "ps_server_updates_lost{shard=\"0\"} 0\n"}) {
    EXPECT_NE(text->find(line), std::string::npos) << line << *text;
  }
  // Not restored: nothing replayed.
  EXPECT_EQ(text->find("ps_server_updates_replayed"), std::string::npos);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadTestFile(log);
  // --report_file: the final report, written at the exit.
  absl::StatusOr<ShardReport> final_report = ReadShardReport(report);
  ASSERT_TRUE(final_report.ok()) << final_report.status();
  EXPECT_EQ(final_report->server_index, 0);
  EXPECT_EQ(final_report->mode, "async");
  EXPECT_EQ(final_report->version, 2u);
  EXPECT_EQ(final_report->updates_lost, 0u);
  EXPECT_FALSE(final_report->updates_replayed.has_value());
}

TEST(ServerBinaryTest, RefusesAMetricsPortInUse) {
  absl::StatusOr<ps::testing::HeldPort> held = ps::testing::HeldPort::Listen();
  ASSERT_TRUE(held.ok()) << held.status();
  const std::string log = TempPath("metrics_in_use.log");
  pid_t pid = Spawn(
      {"--server_index=0", absl::StrCat("--metrics_port=", held->port())}, log);
  ChildGuard guard{pid};
  EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 1) << ReadTestFile(log);
  EXPECT_NE(
      ReadTestFile(log).find(absl::StrCat(
          "--metrics_port: cannot serve metrics on 127.0.0.1:", held->port())),
      std::string::npos)
      << ReadTestFile(log);
}

}  // namespace
}  // namespace ps::server::testing
