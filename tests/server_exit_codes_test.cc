// The server's exit codes that a Kubernetes Job's podFailurePolicy acts on
// (deploy/k8s): 2, never retried, for a checkpoint directory it cannot write
// and for a checkpoint of another run; --signal_exit_code after SIGTERM.

#include <signal.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/parameter_client.h"
#include "common/model_spec.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"

namespace ps::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(120);

std::unique_ptr<Subprocess> StartServer(std::vector<std::string> flags) {
  SubprocessOptions options;
  options.argv = {RunfilePath("server/server"), "--server_index=0",
                  "--num_servers=1", "--num_workers=1", "--host=127.0.0.1"};
  options.argv.insert(options.argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> server =
      Subprocess::Start(std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::string Output(Subprocess& p) {
  return absl::StrJoin(p.OutputLines(), "\n");
}

TEST(ServerExitCodesTest, UnwritableCheckpointDirExitsWithTwo) {
  // Nothing can be created under /proc, not even by root.
  std::unique_ptr<Subprocess> server =
      StartServer({"--port=0", "--checkpoint_dir=/proc/ps-no-such-dir"});
  ASSERT_NE(server, nullptr);
  std::optional<ExitStatus> status = server->WaitFor(kTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, ExitStatus::Exited(2)) << Output(*server);
  EXPECT_NE(Output(*server).find("--checkpoint_dir"), std::string::npos)
      << Output(*server);
}

TEST(ServerExitCodesTest, CheckpointOfAnotherRunExitsWithTwo) {
  const std::string dir = TempPath("other-run-checkpoints");
  const std::string port_file = TempPath("other-run.port");
  std::filesystem::remove_all(dir);
  std::filesystem::remove(port_file);
  {
    // A sync run, stopped: SIGTERM writes its checkpoint.
    std::unique_ptr<Subprocess> server =
        StartServer({"--port=0", absl::StrCat("--port_file=", port_file),
                     absl::StrCat("--checkpoint_dir=", dir), "--mode=sync",
                     "--signal_exit_code=143"});
    ASSERT_NE(server, nullptr);
    absl::StatusOr<int> port =
        WaitForPortFile(port_file, kTimeout, server.get());
    ASSERT_TRUE(port.ok()) << port.status();
    // A shard with a declared model has something to checkpoint.
    ClientOptions options;
    options.servers = {absl::StrCat("127.0.0.1:", *port)};
    absl::StatusOr<std::unique_ptr<ParameterClient>> client =
        ParameterClient::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_TRUE((*client)->Declare(MlpModelSpec({8, 4, 2}), 1).ok());
    ASSERT_TRUE(server->Kill(SIGTERM).ok());
    std::optional<ExitStatus> status = server->WaitFor(kTimeout);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(*status, ExitStatus::Exited(143)) << Output(*server);
  }
  // The same directory for an async run: refused, as configuration.
  std::unique_ptr<Subprocess> server =
      StartServer({"--port=0", absl::StrCat("--checkpoint_dir=", dir),
                   "--mode=async", "--restore"});
  ASSERT_NE(server, nullptr);
  std::optional<ExitStatus> status = server->WaitFor(kTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, ExitStatus::Exited(2)) << Output(*server);
  EXPECT_NE(Output(*server).find("cannot restore"), std::string::npos)
      << Output(*server);
}

}  // namespace
}  // namespace ps::testing
