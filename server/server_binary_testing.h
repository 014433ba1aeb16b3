#ifndef PS_SERVER_SERVER_BINARY_TESTING_H_
#define PS_SERVER_SERVER_BINARY_TESTING_H_

// For the tests that run the real `server` binary (server/server, a data
// dependency) as a child process: starting and awaiting it, its port file,
// and small gRPC clients of one shard.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/declaration_proto.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "common/temp_dir_testing.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"

extern char** environ;

namespace ps::server::testing {

using ::ps::testing::ReadTestFile;

inline std::string TempPath(const std::string& name) {
  return absl::StrCat(::ps::testing::TestTmpDir(), "/", name);
}

// A path inside a new directory of its own, not yet there: reruns outside
// Bazel (/tmp, shared and kept) must not find an earlier run's files.
inline std::string FreshTempPath(const std::string& name) {
  std::string dir = TempPath("server_binary_test.XXXXXX");
  EXPECT_NE(mkdtemp(dir.data()), nullptr) << dir;
  return absl::StrCat(dir, "/", name);
}

// The child's stderr (and, with `and_stdout`, its stdout) goes to
// `stderr_path`.
inline pid_t Spawn(const std::vector<std::string>& flags,
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
inline std::optional<int> WaitForExit(pid_t pid, absl::Duration timeout) {
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

inline int WaitForPortFile(const std::string& path) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    int port = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadTestFile(path)),
                         &port)) {
      return port;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return 0;
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

  grpc::Status Heartbeat(int rank) {
    grpc::ClientContext context;
    proto::HeartbeatRequest request;
    *request.mutable_header() = Header(rank);
    request.set_incarnation(rank + 1);
    proto::HeartbeatResponse response;
    return stub_->Heartbeat(&context, request, &response);
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

}  // namespace ps::server::testing

#endif  // PS_SERVER_SERVER_BINARY_TESTING_H_
