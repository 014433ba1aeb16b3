// Runs the real `server` binary as a child process: flag errors, the port
// file, and both ways it exits (SIGTERM, every worker Done).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"

extern char** environ;

namespace ps::server {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The child's stderr goes to `stderr_path`.
pid_t Spawn(const std::vector<std::string>& flags,
            const std::string& stderr_path) {
  std::vector<std::string> args = {"server/server"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc =
      posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << argv[0];
  return rc == 0 ? pid : -1;
}

// The child's exit code, or nullopt if it is still running after `timeout`.
std::optional<int> WaitForExit(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  do {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < deadline);
  return std::nullopt;
}

// Kills the child if a test left it running.
struct ChildGuard {
  pid_t pid;
  ~ChildGuard() {
    if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

int WaitForPortFile(const std::string& path) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    int port = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(path)), &port)) {
      return port;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return 0;
}

TEST(ServerBinaryTest, ExitsWithTwoNamingTheBadFlag) {
  const std::string log = TempPath("bad_flags.log");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--server_index=0", "--learning_rate=-1"}, "--learning_rate"},
      {{"--server_index=3", "--num_servers=2"}, "--server_index"},
      {{"--server_index=0", "--mode=bsp"}, "--mode"},
      {{"--server_index=0", "--model=10"}, "--model"},
      {{"--server_index=0", "--port=http"}, "--port"},
      {{"--server_index=0", "--num_wrokers=2"}, "--num_wrokers"}};
  for (const auto& [flags, name] : cases) {
    pid_t pid = Spawn(flags, log);
    ChildGuard guard{pid};
    EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 2) << name;
    EXPECT_NE(ReadFile(log).find(name), std::string::npos) << ReadFile(log);
  }
}

TEST(ServerBinaryTest, WritesThePortFileAndExitsCleanlyOnSigterm) {
  const std::string port_file = TempPath("sigterm.port");
  const std::string log = TempPath("sigterm.log");
  std::remove(port_file.c_str());
  pid_t pid = Spawn({"--server_index=0", "--num_servers=1", "--port=0",
                     "--model=8-4-2", absl::StrCat("--port_file=", port_file)},
                    log);
  ChildGuard guard{pid};
  const int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find(absl::StrCat("port ", port)), std::string::npos)
      << ReadFile(log);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("shutting down: signal 15"), std::string::npos)
      << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("staleness"), std::string::npos)
      << "final report missing: " << ReadFile(log);
}

TEST(ServerBinaryTest, ExitsOnceEveryWorkerIsDone) {
  const std::string port_file = TempPath("done.port");
  const std::string log = TempPath("done.log");
  std::remove(port_file.c_str());
  pid_t pid = Spawn({"--server_index=1", "--num_servers=2", "--num_workers=2",
                     "--model=8-4-2", "--mode=async",
                     absl::StrCat("--port_file=", port_file)},
                    log);
  ChildGuard guard{pid};
  const int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadFile(log);

  Partition partition = *Partition::Create(MlpModelSpec({8, 4, 2}), 2);
  auto stub = proto::ParameterServer::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  auto header = [&](int rank) {
    proto::RequestHeader h;
    h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
    h.set_partition_fingerprint(partition.fingerprint());
    h.set_worker_rank(rank);
    h.set_server_index(1);
    return h;
  };
  {
    grpc::ClientContext context;
    proto::RegisterRequest request;
    *request.mutable_header() = header(0);
    request.set_num_tensors(partition.num_tensors());
    proto::RegisterResponse response;
    ASSERT_TRUE(stub->Register(&context, request, &response).ok());
    EXPECT_EQ(response.mode(), "async");
    EXPECT_EQ(response.num_workers(), 2);
  }
  for (int rank : {1, 0}) {
    EXPECT_FALSE(WaitForExit(pid, absl::ZeroDuration()).has_value())
        << "exited before every worker was done";
    grpc::ClientContext context;
    proto::DoneRequest request;
    *request.mutable_header() = header(rank);
    proto::DoneResponse response;
    ASSERT_TRUE(stub->Done(&context, request, &response).ok());
  }
  stub.reset();
  EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("every worker is done"), std::string::npos);
}

}  // namespace
}  // namespace ps::server
