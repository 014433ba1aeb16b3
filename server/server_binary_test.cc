// Runs the real `server` binary as a child process: flag errors, the port
// file, and both ways it exits (SIGTERM, every worker Done), or fails.
#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/server_binary_testing.h"

namespace ps::server::testing {
namespace {

TEST(ServerBinaryTest, ExitsWithTwoNamingTheBadFlag) {
  const std::string log = TempPath("bad_flags.log");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--server_index=0", "--learning_rate=-1"}, "--learning_rate"},
      {{"--server_index=3", "--num_servers=2"}, "--server_index"},
      {{"--server_index=0", "--mode=bsp"}, "--mode"},
      {{"--server_index=0", "--model=8-4-2"}, "--model"},
      {{"--server_index=0", "--max_model_bytes=-1"}, "--max_model_bytes"},
      {{"--server_index=0", "--max_tensors=0"}, "--max_tensors"},
      {{"--server_index=0", "--port=http"}, "--port"},
      {{"--server_index=0", "--num_wrokers=2"}, "--num_wrokers"},
      {{"--server_index=0", "--worker_timeout=0s"}, "--worker_timeout"},
      {{"--server_index=0", "--worker_timeout=ten"}, "--worker_timeout"},
      {{"--server_index=0", "--slow_wait_log=-1s"}, "--slow_wait_log"},
      {{"--server_index=0", "--on_worker_failure=retry"},
       "--on_worker_failure"},
      {{"--server_index=0", "--restore"}, "--checkpoint_dir"},
      {{"--server_index=0", "--extend"}, "--restore"},
      {{"--server_index=0", "--lr_schedule=linear"}, "--lr_schedule"},
      {{"--server_index=0", "--min_learning_rate=1"}, "--min_learning_rate"},
      {{"--server_index=0", "--checkpoint_every_steps=-1"},
       "--checkpoint_every_steps"},
      {{"--server_index=0", "--cpus=1-0"}, "--cpus"},
      {{"--server_index=0", "--non_finite_gradients=zero"},
       "--non_finite_gradients"},
      {{"--server_index=0", "--job_id=a b"}, "--job_id"},
      {{"--server_index=0", "--max_threads=-1"}, "--max_threads"},
      {{"--server_index=0", "--max_calls_per_rank=-1"}, "--max_calls_per_rank"},
      {{"--server_index=0", "--metrics_port=65536"}, "--metrics_port"},
      {{"--server_index=0", "--metrics_port=9100", "--metrics_host=localhost"},
       "--metrics_host"},
      {{"--server_index=0", "--port=9100", "--metrics_port=9100"},
       "--metrics_port"},
      // No machine here has CPU 1023.
      {{"--server_index=0", "--cpus=1023"}, "--cpus"}};
  for (const auto& [flags, name] : cases) {
    pid_t pid = Spawn(flags, log);
    ChildGuard guard{pid};
    EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 2) << name;
    EXPECT_NE(ReadTestFile(log).find(name), std::string::npos)
        << ReadTestFile(log);
  }
}

TEST(ServerBinaryTest, HelpListsTheServersFlags) {
  const std::string log = TempPath("help.log");
  pid_t pid = Spawn({"--help"}, log, /*and_stdout=*/true);
  ChildGuard guard{pid};
  ASSERT_TRUE(WaitForExit(pid, absl::Seconds(30)).has_value());
  const std::string help = ReadTestFile(log);
  EXPECT_NE(help.find("Exit codes: 0 every worker is done"), std::string::npos)
      << help;
  for (const char* flag : {"--server_index", "--mode", "--checkpoint_dir",
                           "--extend", "--metrics_port"}) {
    EXPECT_NE(help.find(absl::StrCat("    ", flag, " (")), std::string::npos)
        << flag << " in:\n"
        << help;
  }
}

TEST(ServerBinaryTest, WritesThePortFileAndExitsCleanlyOnSigterm) {
  const std::string port_file = TempPath("sigterm.port");
  const std::string log = TempPath("sigterm.log");
  std::remove(port_file.c_str());
  pid_t pid = Spawn({"--server_index=0", "--num_servers=1", "--port=0",
                     absl::StrCat("--port_file=", port_file)},
                    log);
  ChildGuard guard{pid};
  const int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadTestFile(log);
  EXPECT_NE(ReadTestFile(log).find(absl::StrCat("port ", port)),
            std::string::npos)
      << ReadTestFile(log);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadTestFile(log);
  EXPECT_NE(ReadTestFile(log).find("shutting down: signal 15"),
            std::string::npos)
      << ReadTestFile(log);
  EXPECT_NE(
      ReadTestFile(log).find("final report:\nserver 0: no model declared"),
      std::string::npos)
      << ReadTestFile(log);
}

TEST(ServerBinaryTest, RefusesAPortAnotherServerHolds) {
  const std::string port_file = TempPath("first.port");
  const std::string log = TempPath("first.log");
  std::remove(port_file.c_str());
  pid_t first = Spawn({"--server_index=0", "--num_servers=1", "--port=0",
                       absl::StrCat("--port_file=", port_file)},
                      log);
  ChildGuard first_guard{first};
  const int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadTestFile(log);
  // Another job's server started on the same port must not share it.
  const std::string second_log = TempPath("second.log");
  pid_t second = Spawn(
      {"--server_index=0", "--num_servers=1", absl::StrCat("--port=", port)},
      second_log);
  ChildGuard second_guard{second};
  EXPECT_EQ(WaitForExit(second, absl::Seconds(30)), 1)
      << ReadTestFile(second_log);
  EXPECT_NE(ReadTestFile(second_log)
                .find(absl::StrCat("cannot listen on 127.0.0.1:", port)),
            std::string::npos)
      << ReadTestFile(second_log);
  ASSERT_EQ(kill(first, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(first, absl::Seconds(30)), 0) << ReadTestFile(log);
}

TEST(ServerBinaryTest, ExitsOnceEveryWorkerIsDone) {
  const std::string port_file = TempPath("done.port");
  const std::string log = TempPath("done.log");
  std::remove(port_file.c_str());
  pid_t pid = Spawn({"--server_index=1", "--num_servers=2", "--num_workers=2",
                     "--mode=async", absl::StrCat("--port_file=", port_file)},
                    log);
  ChildGuard guard{pid};
  const int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadTestFile(log);

  {
    LifecycleClient client(port, /*num_servers=*/2, /*server_index=*/1);
    for (int rank : {0, 1}) {
      absl::StatusOr<proto::RegisterResponse> response = client.Register(rank);
      ASSERT_TRUE(response.ok()) << response.status();
      EXPECT_EQ(response->mode(), proto::MODE_ASYNC);
      EXPECT_EQ(response->num_workers(), 2);
    }
    for (int rank : {1, 0}) {
      EXPECT_FALSE(WaitForExit(pid, absl::ZeroDuration()).has_value())
          << "exited before every worker was done";
      ASSERT_TRUE(client.Done(rank).ok());
    }
  }
  EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadTestFile(log);
  EXPECT_NE(ReadTestFile(log).find("every worker is done"), std::string::npos);
}

TEST(ServerBinaryTest, FailPolicyExitsWithOneNamingTheDeadWorker) {
  const std::string log = TempPath("fail_policy.log");
  const std::string port_file = TempPath("fail_policy.port");
  std::remove(port_file.c_str());
  pid_t pid = Spawn(
      {"--server_index=0", "--num_workers=2", "--worker_timeout=300ms",
       "--on_worker_failure=fail", absl::StrCat("--port_file=", port_file)},
      log);
  ChildGuard guard{pid};
  const int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadTestFile(log);
  // Rank 0 declares the model and heartbeats, as a live worker does; rank 1
  // never comes, and dies when its first lease ends (rank 0's requests show
  // that the shard hears the network).
  LifecycleClient client(port, 1, 0);
  ASSERT_TRUE(client.Register(0).ok());
  std::optional<int> exit_code;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!exit_code.has_value() && absl::Now() < give_up) {
    client.Heartbeat(0);  // Refused once the job failed.
    exit_code = WaitForExit(pid, absl::Milliseconds(50));
  }
  EXPECT_EQ(exit_code, 1) << ReadTestFile(log);
  EXPECT_NE(ReadTestFile(log).find("worker 1 is dead (no heartbeat for 300ms); "
                                   "--on_worker_failure=fail stops the job"),
            std::string::npos)
      << ReadTestFile(log);
}

TEST(ServerBinaryTest, AShardThatHearsFromNoWorkerDeclaresNoneDead) {
  const std::string log = TempPath("unheard.log");
  const std::string port_file = TempPath("unheard.port");
  std::remove(port_file.c_str());
  pid_t pid = Spawn(
      {"--server_index=0", "--num_workers=2", "--worker_timeout=300ms",
       "--on_worker_failure=fail", absl::StrCat("--port_file=", port_file)},
      log);
  ChildGuard guard{pid};
  const int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadTestFile(log);
  // Rank 0 declares the model and says nothing more; rank 1 never comes:
  // the shard may be the one cut off, and fails no one.
  LifecycleClient client(port, 1, 0);
  ASSERT_TRUE(client.Register(0).ok());
  EXPECT_EQ(WaitForExit(pid, absl::Seconds(3)), std::nullopt)
      << ReadTestFile(log);
  // Heard from again, it finds rank 1 dead on rank 0's word.
  std::optional<int> exit_code;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!exit_code.has_value() && absl::Now() < give_up) {
    client.Heartbeat(0);
    exit_code = WaitForExit(pid, absl::Milliseconds(50));
  }
  EXPECT_EQ(exit_code, 1) << ReadTestFile(log);
  const std::string text = ReadTestFile(log);
  EXPECT_NE(text.find("workers 0, 1 silent past --worker_timeout=300ms, but "
                      "not declared dead"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("worker 1 is dead"), std::string::npos) << text;
}

}  // namespace
}  // namespace ps::server::testing
