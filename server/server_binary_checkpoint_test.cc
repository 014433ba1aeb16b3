// Runs the real `server` binary as a child process: its checkpoints, and
// what it restores, resumes or extends from them.
#include <signal.h>
#include <sys/types.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "server/server_binary_testing.h"

namespace ps::server::testing {
namespace {

TEST(ServerBinaryTest, RefusesToResumeAFinishedRun) {
  const std::string dir = FreshTempPath("finished_run");
  const std::string port_file = TempPath("finished.port");
  const std::string log = TempPath("finished.log");
  std::remove(port_file.c_str());
  const std::vector<std::string> flags = {
      "--server_index=0",
      "--num_servers=1",
      "--num_workers=1",
      "--port=0",

      absl::StrCat("--checkpoint_dir=", dir),
      absl::StrCat("--port_file=", port_file)};
  pid_t pid = Spawn(flags, log);
  ChildGuard guard{pid};
  const int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadTestFile(log);
  {
    LifecycleClient client(port, /*num_servers=*/1, /*server_index=*/0);
    ASSERT_TRUE(client.Register(0).ok());
    ASSERT_TRUE(client.Done(0).ok());
  }
  // The run ends with a checkpoint in which every worker is done.
  ASSERT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadTestFile(log);

  std::vector<std::string> again = flags;
  again.push_back("--restore");
  pid_t restarted = Spawn(again, log);
  ChildGuard restarted_guard{restarted};
  EXPECT_EQ(WaitForExit(restarted, absl::Seconds(30)), 2) << ReadTestFile(log);
  EXPECT_NE(ReadTestFile(log).find("is of a finished run"), std::string::npos)
      << ReadTestFile(log);
  EXPECT_NE(ReadTestFile(log).find("pass --extend to train it further"),
            std::string::npos)
      << ReadTestFile(log);
}

TEST(ServerBinaryTest, ExtendsAFinishedRunUnderTheWorkersNewPlan) {
  const std::string dir = FreshTempPath("extended_run");
  const std::string port_file = TempPath("extended.port");
  const std::string log = TempPath("extended.log");
  std::vector<std::string> flags = {"--server_index=0",
                                    "--num_servers=1",
                                    "--num_workers=1",
                                    "--port=0",
                                    absl::StrCat("--checkpoint_dir=", dir),
                                    absl::StrCat("--port_file=", port_file)};
  // Nothing to extend yet: refused, not a fresh start.
  std::vector<std::string> extend = flags;
  extend.insert(extend.end(), {"--restore", "--extend"});
  pid_t early = Spawn(extend, log);
  ChildGuard early_guard{early};
  EXPECT_EQ(WaitForExit(early, absl::Seconds(30)), 2) << ReadTestFile(log);
  EXPECT_NE(ReadTestFile(log).find("so there is no run to extend"),
            std::string::npos)
      << ReadTestFile(log);

  // A run that plans 3 steps finishes.
  std::remove(port_file.c_str());
  pid_t pid = Spawn(flags, log);
  ChildGuard guard{pid};
  int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadTestFile(log);
  {
    LifecycleClient client(port, 1, 0);
    ASSERT_TRUE(client.Register(0, /*planned_steps=*/3).ok());
    ASSERT_TRUE(client.Done(0).ok());
  }
  ASSERT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadTestFile(log);

  // Extended: the server takes the finished run's checkpoint, waits for its
  // worker (it does not exit at once), and a new process of it plans 6.
  std::remove(port_file.c_str());
  pid_t extended = Spawn(extend, log);
  ChildGuard extended_guard{extended};
  port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadTestFile(log);
  {
    LifecycleClient client(port, 1, 0);
    absl::StatusOr<proto::RegisterResponse> registered =
        client.Register(0, /*planned_steps=*/6, /*incarnation=*/7);
    ASSERT_TRUE(registered.ok()) << registered.status() << ReadTestFile(log);
    EXPECT_FALSE(WaitForExit(extended, absl::ZeroDuration()).has_value());
  }
  ASSERT_EQ(kill(extended, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(extended, absl::Seconds(30)), 0) << ReadTestFile(log);
  EXPECT_NE(ReadTestFile(log).find("is of a finished run (version 0, 3 planned "
                                   "steps); its workers train on"),
            std::string::npos)
      << ReadTestFile(log);
  EXPECT_NE(ReadTestFile(log).find("worker 0 plans 6 steps where the restored "
                                   "run planned 3"),
            std::string::npos)
      << ReadTestFile(log);

  // Its checkpoint now holds the new plan: a plain restore keeps it, and a
  // worker planning otherwise is refused naming --extend.
  std::remove(port_file.c_str());
  std::vector<std::string> restore = flags;
  restore.push_back("--restore");
  pid_t resumed = Spawn(restore, log);
  ChildGuard resumed_guard{resumed};
  port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadTestFile(log);
  {
    LifecycleClient client(port, 1, 0);
    absl::StatusOr<proto::RegisterResponse> refused =
        client.Register(0, /*planned_steps=*/9, /*incarnation=*/8);
    ASSERT_FALSE(refused.ok());
    const std::string message(refused.status().message());
    EXPECT_NE(message.find("the run of the restored checkpoint planned 6"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("--extend"), std::string::npos) << message;
    EXPECT_TRUE(client.Register(0, /*planned_steps=*/6, 8).ok());
  }
  ASSERT_EQ(kill(resumed, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(resumed, absl::Seconds(30)), 0) << ReadTestFile(log);
}

TEST(ServerBinaryTest, CheckpointsOnSigtermAndRestoresFromIt) {
  // Empty at first: the first start must not find a checkpoint to refuse.
  const std::string dir = FreshTempPath("ckpt_binary");
  const std::string port_file = TempPath("ckpt.port");
  const std::string log = TempPath("ckpt.log");
  std::remove(port_file.c_str());
  auto start = [&](const std::vector<std::string>& extra) {
    std::remove(port_file.c_str());
    std::vector<std::string> flags = {"--server_index=0", "--mode=async",
                                      absl::StrCat("--checkpoint_dir=", dir),
                                      absl::StrCat("--port_file=", port_file)};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return Spawn(flags, log);
  };
  {
    pid_t pid = start({});
    ChildGuard guard{pid};
    const int port = WaitForPortFile(port_file);
    ASSERT_GT(port, 0) << ReadTestFile(log);
    ShardClient client(port);
    // Nothing to push to before rank 0 declares the model.
    EXPECT_EQ(client.Push(0).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
    ASSERT_TRUE(client.Declare().ok());
    for (uint64_t step : {0, 1, 2}) ASSERT_TRUE(client.Push(step).ok());
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadTestFile(log);
  }
  const std::string checkpoint = absl::StrCat(dir, "/shard-0-3.ckpt");
  ASSERT_TRUE(std::ifstream(checkpoint).good()) << ReadTestFile(log);
  {
    // The directory now holds a run: starting afresh over it is refused.
    pid_t pid = start({});
    ChildGuard guard{pid};
    EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 2);
    EXPECT_NE(ReadTestFile(log).find("pass --restore"), std::string::npos)
        << ReadTestFile(log);
  }
  {
    pid_t pid = start({"--restore"});
    ChildGuard guard{pid};
    const int port = WaitForPortFile(port_file);
    ASSERT_GT(port, 0) << ReadTestFile(log);
    EXPECT_NE(ReadTestFile(log).find(absl::StrCat("restored ", checkpoint,
                                                  ": version 3, 4 tensors")),
              std::string::npos)
        << ReadTestFile(log);
    // The restored shard holds the checkpoint's model: it needs no
    // declaration, and refuses another.
    ShardClient client(port);
    const std::string report = client.Report();
    EXPECT_NE(report.find("version 3\n"), std::string::npos) << report;
    const grpc::Status other =
        ShardClient(port, MlpModelSpec({8, 5, 2})).Declare();
    EXPECT_EQ(other.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(other.error_message().find(absl::StrCat(
                  "tensor 0 \"fc0.weight\" shape: [8,5] declared by rank 0, "
                  "[8,4] by the checkpoint ",
                  checkpoint)),
              std::string::npos)
        << other.error_message();
    ASSERT_TRUE(client.Push(3).ok());
    ASSERT_TRUE(client.Declare().ok());
    EXPECT_NE(report.find("examples per epoch: 0=12\n"), std::string::npos)
        << report;
    EXPECT_NE(client.Report().find("version 4\n"), std::string::npos);
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadTestFile(log);
  }
  // The restored shard's own checkpoint holds the declaration it was
  // restored with.
  const std::string newest = absl::StrCat(dir, "/shard-0-4.ckpt");
  {
    pid_t pid = start({"--restore"});
    ChildGuard guard{pid};
    ASSERT_GT(WaitForPortFile(port_file), 0) << ReadTestFile(log);
    EXPECT_NE(ReadTestFile(log).find(
                  absl::StrCat("restored ", newest, ": version 4, 4 tensors")),
              std::string::npos)
        << ReadTestFile(log);
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadTestFile(log);
  }
  {
    // Its checkpoints corrupted: nothing to resume from, a clear error.
    for (const std::string& path : {newest, checkpoint}) {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(40);
      f.put('\x5a');
    }
    pid_t pid = start({"--restore"});
    ChildGuard guard{pid};
    EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 1) << ReadTestFile(log);
    EXPECT_NE(ReadTestFile(log).find(absl::StrCat("no readable checkpoint of "
                                                  "shard 0 in ",
                                                  dir, ": ", newest)),
              std::string::npos)
        << ReadTestFile(log);
  }
}

}  // namespace
}  // namespace ps::server::testing
