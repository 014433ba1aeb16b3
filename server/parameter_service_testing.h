#ifndef PS_SERVER_PARAMETER_SERVICE_TESTING_H_
#define PS_SERVER_PARAMETER_SERVICE_TESTING_H_

// The fixture of ParameterService's tests (parameter_service*_test.cc,
// register_handler_test.cc): drives the real gRPC service in-process over
// 127.0.0.1 with a raw stub, on a small model declared by rank 0.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/declaration_proto.h"
#include "common/initializer.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "common/tensor_codec.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/grpc_server.h"
#include "server/parameter_service.h"
#include "server/shard_host.h"

namespace ps::server::testing {

inline constexpr int kServer = 1;
inline constexpr int kWorkers = 2;
inline constexpr uint64_t kSeed = 5;
// Longer than any test may run: no worker dies unless a test asks for it.
inline constexpr absl::Duration kLongLease = absl::Minutes(10);

// Elements of this shard, by (tensor id, element index within the tensor).
using Weights = std::map<std::pair<uint32_t, uint64_t>, float>;

class ParameterServiceTest : public ::testing::Test {
 protected:
  // Starts the service; unless `declare_at_start_` is false, with model_
  // declared by rank 0 (as its Register would).
  void Start(ConsistencyMode mode, absl::Duration worker_timeout = kLongLease) {
    partition_ = std::make_unique<Partition>(*Partition::Create(model_, 2));
    host_ = std::make_unique<ShardHost>(
        [this, mode, worker_timeout](const ModelSpec& model) {
          return Build(model, mode, worker_timeout);
        },
        limits_);
    if (declare_at_start_) {
      absl::StatusOr<DeclaredShard*> shard = host_->Declare(0, model_);
      ASSERT_TRUE(shard.ok()) << shard.status();
      for (int rank = 0; rank < kWorkers && register_at_start_; ++rank) {
        ASSERT_TRUE(coordinator_->Register(rank, Incarnation(rank), 0).ok());
      }
    }
    ServiceOptions service_options;
    service_options.server_index = kServer;
    service_options.num_workers = kWorkers;
    service_options.default_chunk_elements = 16;
    service_options.min_chunk_elements = min_chunk_elements_;
    service_options.job_id = job_id_;
    service_options.max_calls_per_rank = max_calls_per_rank_;
    service_options.max_threads = max_threads_;
    service_ = std::make_unique<ParameterService>(host_.get(), service_options);
    GrpcServerOptions server_options;
    server_options.max_message_bytes = 1 << 20;
    server_options.max_threads = max_threads_;
    server_options.stream_service = service_->stream_service();
    server_ = *GrpcServer::Start("127.0.0.1:0", service_.get(),
                                 proto::ParameterServer::service_full_name(),
                                 server_options);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = proto::ParameterServer::NewStub(channel_);
  }

  // What server_main builds for a declaration, with plain SGD at rate 1.
  absl::StatusOr<std::unique_ptr<DeclaredShard>> Build(
      const ModelSpec& model, ConsistencyMode mode,
      absl::Duration worker_timeout) {
    absl::StatusOr<Partition> partition = Partition::Create(model, 2);
    if (!partition.ok()) return partition.status();
    update::OptimizerConfig sgd;
    sgd.kind = OptimizerKind::kSgd;
    sgd.learning_rate = 1.0f;
    sgd.momentum = 0.0f;
    auto shard = std::make_unique<DeclaredShard>();
    shard->store = *update::ShardStore::Create(*partition, kServer, sgd);
    CoordinatorOptions options;
    options.mode = mode;
    options.num_workers = kWorkers;
    options.worker_timeout = worker_timeout;
    options.update_log_dir = update_log_dir_;
    options.on_finished = [this](const absl::Status& outcome) {
      EXPECT_TRUE(outcome.ok()) << outcome;
      all_done_.Notify();  // Twice would crash: it is called once.
    };
    shard->coordinator =
        *UpdateCoordinator::Create(shard->store.get(), options);
    shard->identity = {partition->fingerprint(), kServer, kWorkers, job_id_};
    store_ = shard->store.get();
    coordinator_ = shard->coordinator.get();
    return shard;
  }

  void TearDown() override {
    if (coordinator_ != nullptr) coordinator_->Shutdown();
    if (server_) server_->Shutdown(absl::Now());
  }

  // What rank `rank` registered as, unless a test registers it again.
  static uint64_t Incarnation(int rank) { return 100 + rank; }

  proto::RequestHeader Header(int rank) const {
    proto::RequestHeader h;
    h.set_incarnation(Incarnation(rank));
    h.set_job_id(job_id_);
    h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
    h.set_partition_fingerprint(partition_->fingerprint());
    h.set_worker_rank(rank);
    h.set_server_index(kServer);
    return h;
  }

  // The weights this shard started with.
  Weights InitialWeights() const {
    Weights w;
    for (const Slice& s : partition_->SlicesOfServer(kServer)) {
      std::vector<float> v(s.num_elements);
      InitializeSlice(partition_->model(), s.tensor_id, s.offset,
                      absl::MakeSpan(v));
      for (uint64_t i = 0; i < v.size(); ++i)
        w[{s.tensor_id, s.offset + i}] = v[i];
    }
    return w;
  }

  // Tells server `server_index` that `rank` is done.
  // Registers `rank` as `incarnation`.
  void Register(int rank, uint64_t incarnation) {
    grpc::ClientContext context;
    proto::RegisterRequest request;
    *request.mutable_header() = Header(rank);
    ModelSpecToProto(model_, request.mutable_declaration());
    request.set_incarnation(incarnation);
    proto::RegisterResponse response;
    ASSERT_TRUE(stub_->Register(&context, request, &response).ok());
  }

  // Registers `rank` declaring `model`, with a header for it.
  grpc::Status Declare(int rank, const ModelSpec& model) {
    grpc::ClientContext context;
    proto::RegisterRequest request;
    *request.mutable_header() = Header(rank);
    request.mutable_header()->set_partition_fingerprint(
        Partition::Create(model, 2)->fingerprint());
    ModelSpecToProto(model, request.mutable_declaration());
    request.set_incarnation(Incarnation(rank));
    proto::RegisterResponse response;
    return stub_->Register(&context, request, &response);
  }

  grpc::Status Done(int rank, uint64_t incarnation,
                    int server_index = kServer) {
    grpc::ClientContext context;
    proto::DoneRequest request;
    *request.mutable_header() = Header(rank);
    request.mutable_header()->set_server_index(server_index);
    request.mutable_header()->set_incarnation(incarnation);
    proto::DoneResponse response;
    return stub_->Done(&context, request, &response);
  }

  // Pulls everything.
  grpc::Status Pull(uint64_t clock, uint64_t max_chunk, Weights* weights,
                    uint64_t* version,
                    absl::Duration timeout = absl::Seconds(30)) {
    proto::PullRequest request;
    *request.mutable_header() = Header(0);
    request.set_clock(clock);
    request.set_max_chunk_elements(max_chunk);
    return SendPull(request, weights, version, timeout);
  }

  // Makes the pull `request` asks for.
  grpc::Status SendPull(const proto::PullRequest& request, Weights* weights,
                        uint64_t* version,
                        absl::Duration timeout = absl::Seconds(30)) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    auto reader = stub_->Pull(&context, request);
    ReadWeights(*reader, request.max_chunk_elements(), weights, version);
    return reader->Finish();
  }

  // A step in one call: `messages`, then the weights for clock step + 1.
  grpc::Status PushPull(std::vector<proto::PushRequest> messages,
                        uint64_t max_chunk, Weights* weights, uint64_t* version,
                        absl::Duration timeout = absl::Seconds(30)) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    if (!messages.empty()) {
      messages.front().set_max_pull_chunk_elements(max_chunk);
    }
    auto stream = stub_->PushPull(&context);
    for (const proto::PushRequest& m : messages) {
      if (!stream->Write(m)) break;  // The server refused early.
    }
    stream->WritesDone();
    ReadWeights(*stream, max_chunk, weights, version);
    return stream->Finish();
  }

  // Reads a pull's answer into `weights`; checks each chunk's framing.
  template <typename Reader>
  void ReadWeights(Reader& reader, uint64_t max_chunk, Weights* weights,
                   uint64_t* version) {
    proto::PullResponse response;
    weights->clear();
    while (reader.Read(&response)) {
      const proto::TensorChunk& c = response.chunk();
      *version = response.version();
      EXPECT_EQ(c.dtype(), proto::DTYPE_FLOAT32);
      const TensorSpec& spec = partition_->model().tensors.at(c.tensor_id());
      EXPECT_EQ(std::vector<int64_t>(c.shape().begin(), c.shape().end()),
                spec.shape);
      EXPECT_LE(c.num_elements(), max_chunk == 0 ? 16 : max_chunk);
      std::vector<float> v(c.num_elements());
      EXPECT_TRUE(DecodeFloats(c.data(), absl::MakeSpan(v)).ok());
      for (uint64_t i = 0; i < v.size(); ++i) {
        EXPECT_TRUE(
            weights
                ->emplace(std::make_pair(c.tensor_id(), c.offset() + i), v[i])
                .second)
            << "element sent twice";
      }
    }
  }

  // A valid push of gradient `value` everywhere, in chunks of 10 elements,
  // of the rank's batch number `batch` (8 examples each, default: `step`).
  std::vector<proto::PushRequest> ValidPush(int rank, uint64_t step,
                                            float value,
                                            int64_t batch = -1) const {
    const uint64_t examples_done =
        8 * ((batch < 0 ? step : static_cast<uint64_t>(batch)) + 1);
    std::vector<proto::PushRequest> messages;
    for (const Slice& s : partition_->SlicesOfServer(kServer)) {
      for (uint64_t b = 0; b < s.num_elements; b += 10) {
        const uint64_t n = std::min<uint64_t>(10, s.num_elements - b);
        proto::PushRequest m;
        *m.mutable_header() = Header(rank);
        m.set_step(step);
        m.set_base_version(step);
        m.set_num_examples(8);
        m.set_epoch(0);
        m.set_examples_done(examples_done);
        proto::TensorChunk* c = m.mutable_chunk();
        c->set_tensor_id(s.tensor_id);
        c->set_dtype(proto::DTYPE_FLOAT32);
        for (int64_t d : partition_->model().tensors[s.tensor_id].shape) {
          c->add_shape(d);
        }
        c->set_offset(s.offset + b);
        c->set_num_elements(n);
        EncodeFloats(std::vector<float>(n, value), c->mutable_data());
        messages.push_back(std::move(m));
      }
    }
    return messages;
  }

  grpc::Status Push(const std::vector<proto::PushRequest>& messages,
                    uint64_t* version) {
    grpc::ClientContext context;
    proto::PushResponse response;
    auto writer = stub_->Push(&context, &response);
    for (const proto::PushRequest& m : messages) {
      if (!writer->Write(m)) break;  // The server refused early.
    }
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    *version = response.version();
    return status;
  }

  proto::StatsResponse Stats() {
    grpc::ClientContext context;
    proto::StatsResponse stats;
    EXPECT_TRUE(stub_->Stats(&context, proto::StatsRequest(), &stats).ok());
    return stats;
  }

  // Most tests push and pull chunks of a few elements.
  uint64_t min_chunk_elements_ = 1;
  std::string job_id_;
  int max_threads_ = 0;
  int max_calls_per_rank_ = 8;
  // Where the shard keeps its update log; none if empty.
  std::string update_log_dir_;
  // Before the coordinator, whose callback notifies it.
  absl::Notification all_done_;
  ModelSpec model_ = MlpModelSpec({20, 30, 5}, kSeed);
  DeclarationLimits limits_;
  bool declare_at_start_ = true;
  // Every rank registered as Incarnation(rank) once the model is declared.
  bool register_at_start_ = true;
  std::unique_ptr<Partition> partition_;
  std::unique_ptr<ShardHost> host_;
  // Owned by host_; set once the model is declared.
  update::ShardStore* store_ = nullptr;
  UpdateCoordinator* coordinator_ = nullptr;
  std::unique_ptr<ParameterService> service_;
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
};

}  // namespace ps::server::testing

#endif  // PS_SERVER_PARAMETER_SERVICE_TESTING_H_
