// Runs the real `server` binary as a child process: flag errors, the port
// file, and both ways it exits (SIGTERM, every worker Done).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/declaration_proto.h"
#include "common/http_testing.h"
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

// A path inside a new directory of its own, not yet there: reruns outside
// Bazel (/tmp, shared and kept) must not find an earlier run's files.
std::string FreshTempPath(const std::string& name) {
  std::string dir = TempPath("server_binary_test.XXXXXX");
  EXPECT_NE(mkdtemp(dir.data()), nullptr) << dir;
  return absl::StrCat(dir, "/", name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The child's stderr (and, with `and_stdout`, its stdout) goes to
// `stderr_path`.
pid_t Spawn(const std::vector<std::string>& flags,
            const std::string& stderr_path, bool and_stdout = false) {
  std::vector<std::string> args = {"server/server"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (and_stdout) posix_spawn_file_actions_adddup2(&actions, 2, 1);
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
    EXPECT_NE(ReadFile(log).find(name), std::string::npos) << ReadFile(log);
  }
}

TEST(ServerBinaryTest, HelpListsTheServersFlags) {
  const std::string log = TempPath("help.log");
  pid_t pid = Spawn({"--help"}, log, /*and_stdout=*/true);
  ChildGuard guard{pid};
  ASSERT_TRUE(WaitForExit(pid, absl::Seconds(30)).has_value());
  const std::string help = ReadFile(log);
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
  ASSERT_GT(port, 0) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find(absl::StrCat("port ", port)), std::string::npos)
      << ReadFile(log);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("shutting down: signal 15"), std::string::npos)
      << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("final report:\nserver 0: no model declared"),
            std::string::npos)
      << ReadFile(log);
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
  ASSERT_GT(port, 0) << ReadFile(log);
  // Another job's server started on the same port must not share it.
  const std::string second_log = TempPath("second.log");
  pid_t second = Spawn(
      {"--server_index=0", "--num_servers=1", absl::StrCat("--port=", port)},
      second_log);
  ChildGuard second_guard{second};
  EXPECT_EQ(WaitForExit(second, absl::Seconds(30)), 1) << ReadFile(second_log);
  EXPECT_NE(ReadFile(second_log)
                .find(absl::StrCat("cannot listen on 127.0.0.1:", port)),
            std::string::npos)
      << ReadFile(second_log);
  ASSERT_EQ(kill(first, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(first, absl::Seconds(30)), 0) << ReadFile(log);
}

// A worker's lifecycle calls to one shard of model 8-4-2, without training:
// rank r registers as incarnation r + 1.
class LifecycleClient {
 public:
  LifecycleClient(int port, int num_servers, int server_index)
      : partition_(*Partition::Create(MlpModelSpec({8, 4, 2}), num_servers)),
        server_index_(server_index),
        stub_(proto::ParameterServer::NewStub(
            grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                grpc::InsecureChannelCredentials()))) {}

  // `incarnation` 0: rank + 1.
  absl::StatusOr<proto::RegisterResponse> Register(int rank,
                                                   uint64_t planned_steps = 0,
                                                   uint64_t incarnation = 0) {
    grpc::ClientContext context;
    proto::RegisterRequest request;
    *request.mutable_header() = Header(rank);
    ModelSpecToProto(partition_.model(), request.mutable_declaration());
    request.set_incarnation(incarnation != 0 ? incarnation : rank + 1);
    request.set_planned_steps(planned_steps);
    proto::RegisterResponse response;
    const grpc::Status s = stub_->Register(&context, request, &response);
    if (!s.ok()) return absl::UnknownError(s.error_message());
    return response;
  }

  grpc::Status Done(int rank) {
    grpc::ClientContext context;
    proto::DoneRequest request;
    *request.mutable_header() = Header(rank);
    proto::DoneResponse response;
    return stub_->Done(&context, request, &response);
  }

 private:
  proto::RequestHeader Header(int rank) const {
    proto::RequestHeader h;
    h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
    h.set_partition_fingerprint(partition_.fingerprint());
    h.set_worker_rank(rank);
    h.set_server_index(server_index_);
    h.set_incarnation(rank + 1);
    return h;
  }

  const Partition partition_;
  const int server_index_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
};

TEST(ServerBinaryTest, ExitsOnceEveryWorkerIsDone) {
  const std::string port_file = TempPath("done.port");
  const std::string log = TempPath("done.log");
  std::remove(port_file.c_str());
  pid_t pid = Spawn({"--server_index=1", "--num_servers=2", "--num_workers=2",
                     "--mode=async", absl::StrCat("--port_file=", port_file)},
                    log);
  ChildGuard guard{pid};
  const int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadFile(log);

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
  EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("every worker is done"), std::string::npos);
}

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
  ASSERT_GT(port, 0) << ReadFile(log);
  {
    LifecycleClient client(port, /*num_servers=*/1, /*server_index=*/0);
    ASSERT_TRUE(client.Register(0).ok());
    ASSERT_TRUE(client.Done(0).ok());
  }
  // The run ends with a checkpoint in which every worker is done.
  ASSERT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadFile(log);

  std::vector<std::string> again = flags;
  again.push_back("--restore");
  pid_t restarted = Spawn(again, log);
  ChildGuard restarted_guard{restarted};
  EXPECT_EQ(WaitForExit(restarted, absl::Seconds(30)), 2) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("is of a finished run"), std::string::npos)
      << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("pass --extend to train it further"),
            std::string::npos)
      << ReadFile(log);
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
  EXPECT_EQ(WaitForExit(early, absl::Seconds(30)), 2) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("so there is no run to extend"),
            std::string::npos)
      << ReadFile(log);

  // A run that plans 3 steps finishes.
  std::remove(port_file.c_str());
  pid_t pid = Spawn(flags, log);
  ChildGuard guard{pid};
  int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadFile(log);
  {
    LifecycleClient client(port, 1, 0);
    ASSERT_TRUE(client.Register(0, /*planned_steps=*/3).ok());
    ASSERT_TRUE(client.Done(0).ok());
  }
  ASSERT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadFile(log);

  // Extended: the server takes the finished run's checkpoint, waits for its
  // worker (it does not exit at once), and a new process of it plans 6.
  std::remove(port_file.c_str());
  pid_t extended = Spawn(extend, log);
  ChildGuard extended_guard{extended};
  port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadFile(log);
  {
    LifecycleClient client(port, 1, 0);
    absl::StatusOr<proto::RegisterResponse> registered =
        client.Register(0, /*planned_steps=*/6, /*incarnation=*/7);
    ASSERT_TRUE(registered.ok()) << registered.status() << ReadFile(log);
    EXPECT_FALSE(WaitForExit(extended, absl::ZeroDuration()).has_value());
  }
  ASSERT_EQ(kill(extended, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(extended, absl::Seconds(30)), 0) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("is of a finished run (version 0, 3 planned "
                               "steps); its workers train on"),
            std::string::npos)
      << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("worker 0 plans 6 steps where the restored "
                               "run planned 3"),
            std::string::npos)
      << ReadFile(log);

  // Its checkpoint now holds the new plan: a plain restore keeps it, and a
  // worker planning otherwise is refused naming --extend.
  std::remove(port_file.c_str());
  std::vector<std::string> restore = flags;
  restore.push_back("--restore");
  pid_t resumed = Spawn(restore, log);
  ChildGuard resumed_guard{resumed};
  port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadFile(log);
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
  EXPECT_EQ(WaitForExit(resumed, absl::Seconds(30)), 0) << ReadFile(log);
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
  ASSERT_GT(port, 0) << ReadFile(log);
  // Rank 0 declares the model and says nothing more; rank 1 never comes.
  // Both die when their first lease ends.
  ASSERT_TRUE(LifecycleClient(port, 1, 0).Register(0).ok());
  EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 1) << ReadFile(log);
  // One checker pass may find both leases ended, or one each.
  EXPECT_NE(ReadFile(log).find("dead (no heartbeat for 300ms); "
                               "--on_worker_failure=fail stops the job"),
            std::string::npos)
      << ReadFile(log);
}

// A shard of `model` (default 8-4-2) on one server, driven over gRPC as
// rank 0.
class ShardClient {
 public:
  static constexpr uint64_t kIncarnation = 7;

  explicit ShardClient(int port,
                       const ModelSpec& model = MlpModelSpec({8, 4, 2}))
      : partition_(*Partition::Create(model, 1)),
        stub_(proto::ParameterServer::NewStub(
            grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                grpc::InsecureChannelCredentials()))) {}

  proto::RequestHeader Header() const {
    proto::RequestHeader h;
    h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
    h.set_partition_fingerprint(partition_.fingerprint());
    h.set_worker_rank(0);
    h.set_server_index(0);
    h.set_incarnation(kIncarnation);
    return h;
  }

  // Registers rank 0, declaring the model.
  grpc::Status Declare() {
    grpc::ClientContext context;
    proto::RegisterRequest request;
    *request.mutable_header() = Header();
    ModelSpecToProto(partition_.model(), request.mutable_declaration());
    request.set_incarnation(kIncarnation);
    proto::RegisterResponse response;
    return stub_->Register(&context, request, &response);
  }

  // Pushes gradient 1 everywhere for `step`, a batch of 4 examples.
  grpc::Status Push(uint64_t step) {
    grpc::ClientContext context;
    proto::PushResponse response;
    auto writer = stub_->Push(&context, &response);
    for (const Slice& s : partition_.SlicesOfServer(0)) {
      proto::PushRequest m;
      *m.mutable_header() = Header();
      m.set_step(step);
      m.set_num_examples(4);
      m.set_examples_done(4 * (step + 1));
      proto::TensorChunk* c = m.mutable_chunk();
      c->set_tensor_id(s.tensor_id);
      c->set_dtype(proto::DTYPE_FLOAT32);
      for (int64_t d : partition_.model().tensors[s.tensor_id].shape) {
        c->add_shape(d);
      }
      c->set_offset(s.offset);
      c->set_num_elements(s.num_elements);
      std::string* data = c->mutable_data();
      for (uint64_t i = 0; i < s.num_elements; ++i) {
        data->append("\x00\x00\x80\x3f", 4);  // 1.0f, little-endian.
      }
      writer->Write(m);
    }
    writer->WritesDone();
    return writer->Finish();
  }

  std::string Report() {
    grpc::ClientContext context;
    proto::StatsResponse response;
    EXPECT_TRUE(stub_->Stats(&context, proto::StatsRequest(), &response).ok());
    return response.report();
  }

 private:
  Partition partition_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
};

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
    ASSERT_GT(port, 0) << ReadFile(log);
    ShardClient client(port);
    // Nothing to push to before rank 0 declares the model.
    EXPECT_EQ(client.Push(0).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
    ASSERT_TRUE(client.Declare().ok());
    for (uint64_t step : {0, 1, 2}) ASSERT_TRUE(client.Push(step).ok());
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadFile(log);
  }
  const std::string checkpoint = absl::StrCat(dir, "/shard-0-3.ckpt");
  ASSERT_TRUE(std::ifstream(checkpoint).good()) << ReadFile(log);
  {
    // The directory now holds a run: starting afresh over it is refused.
    pid_t pid = start({});
    ChildGuard guard{pid};
    EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 2);
    EXPECT_NE(ReadFile(log).find("pass --restore"), std::string::npos)
        << ReadFile(log);
  }
  {
    pid_t pid = start({"--restore"});
    ChildGuard guard{pid};
    const int port = WaitForPortFile(port_file);
    ASSERT_GT(port, 0) << ReadFile(log);
    EXPECT_NE(ReadFile(log).find(absl::StrCat("restored ", checkpoint,
                                              ": version 3, 4 tensors")),
              std::string::npos)
        << ReadFile(log);
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
    EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadFile(log);
  }
  // The restored shard's own checkpoint holds the declaration it was
  // restored with.
  const std::string newest = absl::StrCat(dir, "/shard-0-4.ckpt");
  {
    pid_t pid = start({"--restore"});
    ChildGuard guard{pid};
    ASSERT_GT(WaitForPortFile(port_file), 0) << ReadFile(log);
    EXPECT_NE(ReadFile(log).find(
                  absl::StrCat("restored ", newest, ": version 4, 4 tensors")),
              std::string::npos)
        << ReadFile(log);
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadFile(log);
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
    EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 1) << ReadFile(log);
    EXPECT_NE(ReadFile(log).find(absl::StrCat("no readable checkpoint of "
                                              "shard 0 in ",
                                              dir, ": ", newest)),
              std::string::npos)
        << ReadFile(log);
  }
}

TEST(ServerBinaryTest, ServesMetricsCountingPushesAndCheckpoints) {
  const std::string dir = FreshTempPath("metrics_ckpt");
  const std::string port_file = TempPath("metrics.port");
  const std::string log = TempPath("metrics.log");
  std::remove(port_file.c_str());
  absl::StatusOr<int> metrics_port = testing::UnusedLoopbackPort();
  ASSERT_TRUE(metrics_port.ok()) << metrics_port.status();
  pid_t pid = Spawn(
      {"--server_index=0", "--mode=async",
       absl::StrCat("--checkpoint_dir=", dir), "--checkpoint_every_steps=1",
       absl::StrCat("--metrics_port=", *metrics_port),
       absl::StrCat("--port_file=", port_file)},
      log);
  ChildGuard guard{pid};
  const int port = WaitForPortFile(port_file);
  ASSERT_GT(port, 0) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find(absl::StrCat("serving metrics on http://"
                                            "127.0.0.1:",
                                            *metrics_port, "/metrics")),
            std::string::npos)
      << ReadFile(log);

  ShardClient client(port);
  EXPECT_EQ(client.Push(0).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(client.Declare().ok());
  for (uint64_t step : {0, 1}) ASSERT_TRUE(client.Push(step).ok());
  // The checkpoint of version 2 is written in the background.
  absl::StatusOr<std::string> text;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    text = testing::HttpGet(*metrics_port, "/metrics");
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
        "ps_server_restored{shard=\"0\"} 0\n"}) {
    EXPECT_NE(text->find(line), std::string::npos) << line << *text;
  }
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 0) << ReadFile(log);
}

TEST(ServerBinaryTest, RefusesAMetricsPortInUse) {
  absl::StatusOr<testing::HeldPort> held = testing::HeldPort::Listen();
  ASSERT_TRUE(held.ok()) << held.status();
  const std::string log = TempPath("metrics_in_use.log");
  pid_t pid = Spawn(
      {"--server_index=0", absl::StrCat("--metrics_port=", held->port())}, log);
  ChildGuard guard{pid};
  EXPECT_EQ(WaitForExit(pid, absl::Seconds(30)), 1) << ReadFile(log);
  EXPECT_NE(
      ReadFile(log).find(absl::StrCat(
          "--metrics_port: cannot serve metrics on 127.0.0.1:", held->port())),
      std::string::npos)
      << ReadFile(log);
}

}  // namespace
}  // namespace ps::server
