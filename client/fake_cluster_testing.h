#ifndef PS_CLIENT_FAKE_CLUSTER_TESTING_H_
#define PS_CLIENT_FAKE_CLUSTER_TESTING_H_

// Fake shards for the tests of ps::ParameterClient: in-process gRPC
// services that record what the client sends and answer as the contract in
// proto/parameter_server.proto says, without the real server's logic.

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/parameter_client.h"
#include "common/declaration_proto.h"
#include "common/partition.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"

namespace ps::client_testing {

// What every fake shard holds: element e of tensor t.
float FakeWeight(uint32_t t, uint64_t e) {
  return static_cast<float>(t) * 1000.0f + static_cast<float>(e) * 0.5f;
}

// One chunk a shard received in a push stream.
struct ReceivedChunk {
  uint32_t tensor_id = 0;
  uint64_t offset = 0;
  std::vector<float> values;
};

// One push or push-and-pull call, as the shard read it.
struct ReceivedPush {
  proto::PushRequest first;  // The first message, chunk data cleared.
  std::vector<ReceivedChunk> chunks;
  bool pull_after = false;
  // Every message had PushRequest.initial_values set.
  bool all_initial_values = true;
  // The client ended the stream (WritesDone) rather than cancelling it.
  bool completed = false;
};

// A shard of the contract's shape: builds its partition from the first
// declaration, answers every pull with FakeWeight over its slices, and
// records every request.
class FakeShard final : public proto::ParameterServer::Service {
 public:
  FakeShard(int index, int num_servers)
      : index_(index), num_servers_(num_servers) {}

  // Answers the next `n` Registers UNAVAILABLE (rank 0 has not declared).
  void RefuseRegisters(int n) {
    absl::MutexLock lock(&mu_);
    refuse_registers_ = n;
  }
  void SetResponse(const proto::RegisterResponse& response) {
    absl::MutexLock lock(&mu_);
    response_ = response;
  }

  std::vector<proto::RegisterRequest> registers() const {
    absl::MutexLock lock(&mu_);
    return registers_;
  }
  // Waits up to `timeout` until `n` push calls have ended.
  bool WaitForPushes(size_t n, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return pushes_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  std::vector<ReceivedPush> pushes() const {
    absl::MutexLock lock(&mu_);
    return pushes_;
  }
  std::vector<proto::PullRequest> pulls() const {
    absl::MutexLock lock(&mu_);
    return pulls_;
  }
  std::vector<uint64_t> barriers() const {
    absl::MutexLock lock(&mu_);
    return barriers_;
  }
  int dones() const {
    absl::MutexLock lock(&mu_);
    return dones_;
  }

  grpc::Status Register(grpc::ServerContext*,
                        const proto::RegisterRequest* request,
                        proto::RegisterResponse* response) override {
    absl::MutexLock lock(&mu_);
    registers_.push_back(*request);
    if (refuse_registers_ > 0) {
      --refuse_registers_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "rank 0 has not declared yet");
    }
    if (!partition_.has_value()) {
      absl::StatusOr<ModelSpec> model =
          ModelSpecFromProto(request->declaration());
      if (!model.ok()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            std::string(model.status().message()));
      }
      absl::StatusOr<Partition> partition =
          Partition::Create(*model, num_servers_);
      if (!partition.ok()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            std::string(partition.status().message()));
      }
      partition_.emplace(*std::move(partition));
    }
    *response = response_;
    return grpc::Status::OK;
  }

  grpc::Status Pull(grpc::ServerContext*, const proto::PullRequest* request,
                    grpc::ServerWriter<proto::PullResponse>* writer) override {
    {
      absl::MutexLock lock(&mu_);
      pulls_.push_back(*request);
    }
    return SendWeights(request->max_chunk_elements(), writer);
  }

  grpc::Status Push(grpc::ServerContext* context,
                    grpc::ServerReader<proto::PushRequest>* reader,
                    proto::PushResponse* response) override {
    ReceivedPush push = ReadPush(reader);
    push.completed = !context->IsCancelled();
    response->set_version(kVersion);
    absl::MutexLock lock(&mu_);
    pushes_.push_back(std::move(push));
    return grpc::Status::OK;
  }

  grpc::Status PushPull(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<proto::PullResponse, proto::PushRequest>* stream)
      override {
    ReceivedPush push = ReadPush(stream);
    push.pull_after = true;
    push.completed = !context->IsCancelled();
    const uint64_t chunk = push.first.max_pull_chunk_elements();
    {
      absl::MutexLock lock(&mu_);
      pushes_.push_back(std::move(push));
    }
    if (context->IsCancelled()) return grpc::Status::CANCELLED;
    return SendWeights(chunk, stream);
  }

  grpc::Status Barrier(grpc::ServerContext*,
                       const proto::BarrierRequest* request,
                       proto::BarrierResponse*) override {
    absl::MutexLock lock(&mu_);
    barriers_.push_back(request->generation());
    return grpc::Status::OK;
  }

  grpc::Status Done(grpc::ServerContext*, const proto::DoneRequest*,
                    proto::DoneResponse*) override {
    absl::MutexLock lock(&mu_);
    ++dones_;
    return grpc::Status::OK;
  }

  static constexpr uint64_t kVersion = 7;

 private:
  template <typename Reader>
  static ReceivedPush ReadPush(Reader* reader) {
    ReceivedPush push;
    proto::PushRequest message;
    bool first = true;
    while (reader->Read(&message)) {
      const proto::TensorChunk& chunk = message.chunk();
      ReceivedChunk received;
      received.tensor_id = chunk.tensor_id();
      received.offset = chunk.offset();
      received.values.resize(chunk.data().size() / sizeof(float));
      std::memcpy(received.values.data(), chunk.data().data(),
                  received.values.size() * sizeof(float));
      push.chunks.push_back(std::move(received));
      push.all_initial_values &= message.initial_values();
      if (first) {
        push.first = message;
        push.first.mutable_chunk()->clear_data();
        first = false;
      }
    }
    return push;
  }

  template <typename Writer>
  grpc::Status SendWeights(uint64_t max_chunk, Writer* writer) {
    std::vector<Slice> slices;
    ModelSpec model;
    {
      absl::MutexLock lock(&mu_);
      if (!partition_.has_value()) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            "not declared");
      }
      slices = partition_->SlicesOfServer(index_);
      model = partition_->model();
    }
    if (max_chunk == 0) max_chunk = 1 << 18;
    for (const Slice& slice : slices) {
      for (uint64_t done = 0; done < slice.num_elements; done += max_chunk) {
        const uint64_t n = std::min(max_chunk, slice.num_elements - done);
        proto::PullResponse response;
        response.set_version(kVersion);
        proto::TensorChunk* chunk = response.mutable_chunk();
        chunk->set_tensor_id(slice.tensor_id);
        chunk->set_dtype(proto::DTYPE_FLOAT32);
        const std::vector<int64_t>& shape =
            model.tensors[slice.tensor_id].shape;
        chunk->mutable_shape()->Assign(shape.begin(), shape.end());
        chunk->set_offset(slice.offset + done);
        chunk->set_num_elements(n);
        std::vector<float> values(n);
        for (uint64_t i = 0; i < n; ++i) {
          values[i] = FakeWeight(slice.tensor_id, slice.offset + done + i);
        }
        chunk->set_data(values.data(), n * sizeof(float));
        if (!writer->Write(response)) return grpc::Status::CANCELLED;
      }
    }
    return grpc::Status::OK;
  }

  const int index_;
  const int num_servers_;
  mutable absl::Mutex mu_;
  int refuse_registers_ ABSL_GUARDED_BY(mu_) = 0;
  proto::RegisterResponse response_ ABSL_GUARDED_BY(mu_);
  std::optional<Partition> partition_ ABSL_GUARDED_BY(mu_);
  std::vector<proto::RegisterRequest> registers_ ABSL_GUARDED_BY(mu_);
  std::vector<proto::PullRequest> pulls_ ABSL_GUARDED_BY(mu_);
  std::vector<ReceivedPush> pushes_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> barriers_ ABSL_GUARDED_BY(mu_);
  int dones_ ABSL_GUARDED_BY(mu_) = 0;
};

// `n` fake shards on 127.0.0.1, each answering sync mode with 2 workers.
class FakeCluster {
 public:
  explicit FakeCluster(int n) {
    for (int i = 0; i < n; ++i) {
      shards_.push_back(std::make_unique<FakeShard>(i, n));
      proto::RegisterResponse response;
      response.set_mode(proto::MODE_SYNC);
      response.set_num_workers(2);
      shards_.back()->SetResponse(response);
      grpc::ServerBuilder builder;
      int port = 0;
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                               &port);
      builder.RegisterService(shards_.back().get());
      servers_.push_back(builder.BuildAndStart());
      addresses_.push_back(absl::StrCat("127.0.0.1:", port));
    }
  }

  ~FakeCluster() {
    for (auto& server : servers_) server->Shutdown();
  }

  FakeShard& shard(int i) { return *shards_[i]; }
  int size() const { return static_cast<int>(shards_.size()); }

  ClientOptions Options(int rank) const {
    ClientOptions options;
    options.servers = addresses_;
    options.rank = rank;
    options.job_id = "test-job";
    options.chunk_elements = 50;  // Several chunks per slice.
    options.connect_timeout = absl::Seconds(10);
    options.retry_timeout = absl::Seconds(10);
    options.initial_backoff = absl::Milliseconds(5);
    options.max_backoff = absl::Milliseconds(20);
    return options;
  }

 private:
  std::vector<std::unique_ptr<FakeShard>> shards_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::vector<std::string> addresses_;
};

}  // namespace ps::client_testing

#endif  // PS_CLIENT_FAKE_CLUSTER_TESTING_H_
