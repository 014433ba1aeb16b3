// Drives the real gRPC service in-process over 127.0.0.1 with a raw stub.
#include "server/parameter_service.h"

#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/byte_stream_call.h"
#include "common/chunk_wire.h"
#include "common/declaration_proto.h"
#include "common/initializer.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "common/tensor_codec.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "server/grpc_server.h"

namespace ps::server {
namespace {

constexpr int kServer = 1;
constexpr int kWorkers = 2;
constexpr uint64_t kSeed = 5;
// Longer than any test may run: no worker dies unless a test asks for it.
constexpr absl::Duration kLongLease = absl::Minutes(10);

// Elements of this shard, by (tensor id, element index within the tensor).
using Weights = std::map<std::pair<uint32_t, uint64_t>, float>;

// Pulls in rank 0's name for clock 1, each on a thread of its own: in sync
// mode, with nobody pushing, they wait (holding a server thread each) until
// cancelled, unless the server refuses them. Counts how each ended.
class HangingPulls {
 public:
  HangingPulls(proto::ParameterServer::Stub* stub,
               const proto::RequestHeader& header, int count) {
    for (int i = 0; i < count; ++i) {
      contexts_.push_back(std::make_unique<grpc::ClientContext>());
    }
    for (int i = 0; i < count; ++i) {
      threads_.emplace_back([this, stub, header, i] {
        proto::PullRequest request;
        *request.mutable_header() = header;
        request.set_clock(1);
        auto reader = stub->Pull(contexts_[i].get(), request);
        proto::PullResponse response;
        while (reader->Read(&response)) {
        }
        const grpc::Status s = reader->Finish();
        absl::MutexLock lock(&mu_);
        if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          refusals_.push_back(s.error_message());
        } else {
          ++other_;
        }
      });
    }
  }
  ~HangingPulls() { CancelAndJoin(); }

  // Waits (a minute at most) until `n` pulls were refused.
  void AwaitRefused(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return static_cast<int>(refusals_.size()) >= n;
    };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(60));
  }

  void CancelAndJoin() {
    for (auto& context : contexts_) context->TryCancel();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  std::vector<std::string> refusals() {
    absl::MutexLock lock(&mu_);
    return refusals_;
  }
  // Pulls that ended otherwise than refused (cancelled, or answered).
  int other() {
    absl::MutexLock lock(&mu_);
    return other_;
  }

 private:
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  std::vector<std::string> refusals_ ABSL_GUARDED_BY(mu_);
  int other_ ABSL_GUARDED_BY(mu_) = 0;
};

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

TEST_F(ParameterServiceTest, RegisterReportsModeWorkersAndVersion) {
  Start(ConsistencyMode::kSsp);
  grpc::ClientContext context;
  proto::RegisterRequest request;
  *request.mutable_header() = Header(1);
  ModelSpecToProto(model_, request.mutable_declaration());
  request.set_incarnation(77);
  proto::RegisterResponse response;
  ASSERT_TRUE(stub_->Register(&context, request, &response).ok());
  EXPECT_EQ(response.mode(), proto::MODE_SSP);
  EXPECT_EQ(response.num_workers(), kWorkers);
  EXPECT_EQ(response.version(), 0u);
  EXPECT_EQ(response.next_step(), 0u);
}

TEST_F(ParameterServiceTest, RegisterRefusesAMismatchedWorker) {
  Start(ConsistencyMode::kSync);
  struct Case {
    std::function<void(proto::RegisterRequest&)> mutate;
    const char* text;
    grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT;
  };
  const Case cases[] = {
      {[](proto::RegisterRequest& r) {
         r.mutable_declaration()->mutable_tensors(3)->set_shape(0, 6);
       },
       "register refused: tensor 3 \"fc1.bias\" shape: [6] declared by rank "
       "0, [5] by rank 0",
       grpc::StatusCode::FAILED_PRECONDITION},
      {[](proto::RegisterRequest& r) {
         r.mutable_declaration()->mutable_tensors()->RemoveLast();
       },
       "rank 0 declares 3 tensors, rank 0 4: tensor 3 \"fc1.bias\"",
       grpc::StatusCode::FAILED_PRECONDITION},
      {[](proto::RegisterRequest& r) {
         r.mutable_declaration()->mutable_tensors(0)->set_name("");
       },
       "tensor 0 \"\": the name is empty"},
      {[](proto::RegisterRequest& r) {
         r.mutable_header()->set_partition_fingerprint(1);
       },
       "partition fingerprint"},
      {[](proto::RegisterRequest& r) {
         r.mutable_header()->set_server_index(0);
       },
       "request is for server 0 but this is server 1"},
      {[](proto::RegisterRequest& r) {
         r.mutable_header()->set_worker_rank(2);
       },
       "worker rank 2 is outside [0, 2)"},
      {[](proto::RegisterRequest& r) {
         r.mutable_header()->set_protocol_version(0);
       },
       "protocol version 0"},
  };
  for (const Case& c : cases) {
    grpc::ClientContext context;
    proto::RegisterRequest request;
    *request.mutable_header() = Header(0);
    ModelSpecToProto(model_, request.mutable_declaration());
    c.mutate(request);
    proto::RegisterResponse response;
    grpc::Status s = stub_->Register(&context, request, &response);
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    EXPECT_NE(s.error_message().find(c.text), std::string::npos)
        << s.error_message();
  }
}

TEST_F(ParameterServiceTest, RefusesEveryRequestOfAnotherJob) {
  job_id_ = "run-a";
  Start(ConsistencyMode::kAsync);
  const std::string expected =
      "the request is of job \"run-b\" but this server is of job \"run-a\"";
  {
    grpc::ClientContext context;
    proto::RegisterRequest request;
    *request.mutable_header() = Header(0);
    request.mutable_header()->set_job_id("run-b");
    ModelSpecToProto(model_, request.mutable_declaration());
    proto::RegisterResponse response;
    const grpc::Status s = stub_->Register(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find(expected), std::string::npos)
        << s.error_message();
  }
  std::vector<proto::PushRequest> push = ValidPush(0, 0, 1.0f);
  for (proto::PushRequest& m : push) m.mutable_header()->set_job_id("run-b");
  uint64_t version = 0;
  const grpc::Status s = Push(push, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find(expected), std::string::npos)
      << s.error_message();
  // The job's own requests go through.
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  EXPECT_EQ(version, 1u);
}

TEST_F(ParameterServiceTest, CallsBeyondTheThreadBoundAreRefusedThenServed) {
  max_threads_ = 6;
  max_calls_per_rank_ = 0;  // The thread bound alone.
  Start(ConsistencyMode::kSync);
  constexpr int kPulls = 12;
  HangingPulls pulls(stub_.get(), Header(0), kPulls);
  pulls.AwaitRefused(1);
  // Nothing else ended: the others still wait, holding their threads.
  EXPECT_GT(pulls.refusals().size(), 0u);
  EXPECT_EQ(pulls.other(), 0);
  pulls.CancelAndJoin();
  EXPECT_LT(pulls.refusals().size(), static_cast<size_t>(kPulls));
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  // The threads come back as the cancelled pulls return: the server answers
  // again.
  grpc::Status stats;
  do {
    grpc::ClientContext context;
    proto::StatsResponse response;
    stats = stub_->Stats(&context, proto::StatsRequest(), &response);
    if (stats.ok()) break;
    EXPECT_EQ(stats.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < give_up);
  EXPECT_TRUE(stats.ok()) << stats.error_message();
}

TEST_F(ParameterServiceTest, OneRankCannotHoldMoreThanItsCalls) {
  max_calls_per_rank_ = 3;
  Start(ConsistencyMode::kSync);
  // Three are held, the rest refused.
  constexpr int kPulls = 6;
  HangingPulls pulls(stub_.get(), Header(0), kPulls);
  pulls.AwaitRefused(kPulls - 3);
  // Rank 1 is not held up by rank 0's calls (a pull for clock 0 is answered
  // at once; a push from it could complete the step the others wait for).
  proto::PullRequest request;
  *request.mutable_header() = Header(1);
  request.set_clock(0);
  Weights weights;
  uint64_t version = 0;
  EXPECT_TRUE(SendPull(request, &weights, &version).ok());
  EXPECT_EQ(pulls.other(), 0);
  pulls.CancelAndJoin();
  const std::vector<std::string> refusals = pulls.refusals();
  ASSERT_EQ(refusals.size(), static_cast<size_t>(kPulls - 3));
  EXPECT_NE(refusals[0].find(
                "worker 0 has 3 calls open on this server already; at most 3"),
            std::string::npos)
      << refusals[0];
}

TEST_F(ParameterServiceTest, PullStreamsEveryOwnedElementInBoundedChunks) {
  Start(ConsistencyMode::kSync);
  for (uint64_t max_chunk : {0, 7, 1000}) {
    Weights weights;
    uint64_t version = 99;
    ASSERT_TRUE(Pull(0, max_chunk, &weights, &version).ok());
    EXPECT_EQ(version, 0u);
    EXPECT_EQ(weights, InitialWeights()) << "max_chunk " << max_chunk;
  }
}

TEST_F(ParameterServiceTest, RefusesChunksBelowTheMinimum) {
  min_chunk_elements_ = 16;
  Start(ConsistencyMode::kAsync);
  Weights weights;
  uint64_t version = 0;
  grpc::Status s = Pull(0, 7, &weights, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find(
                "max_chunk_elements 7 is below this server's minimum of 16"),
            std::string::npos)
      << s.error_message();
  // A push in chunks of 10 (slices hold more than 16 elements): refused.
  s = Push(ValidPush(0, 0, 1.0f), &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("chunks hold at least 16"),
            std::string::npos)
      << s.error_message();
  ASSERT_TRUE(Pull(0, 16, &weights, &version).ok());
  EXPECT_EQ(weights, InitialWeights()) << "a refused push changed weights";
}

TEST_F(ParameterServiceTest, SyncPushesFromAllRanksUpdateTheWeights) {
  Start(ConsistencyMode::kSync);
  uint64_t version = 0;
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  EXPECT_EQ(version, 0u);
  ASSERT_TRUE(Push(ValidPush(1, 0, 3.0f), &version).ok());
  EXPECT_EQ(version, 1u);
  Weights weights;
  ASSERT_TRUE(Pull(1, 0, &weights, &version).ok());
  EXPECT_EQ(version, 1u);
  Weights expected = InitialWeights();
  ASSERT_EQ(weights.size(), expected.size());
  for (auto& [key, w] : expected) {
    EXPECT_FLOAT_EQ(weights[key], w - 2.0f);  // lr 1 * mean(1, 3)
  }
}

TEST_F(ParameterServiceTest, SyncPullForAFutureClockWaits) {
  Start(ConsistencyMode::kSync);
  Weights weights;
  uint64_t version = 0;
  grpc::Status s = Pull(1, 0, &weights, &version, absl::Milliseconds(300));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(weights.empty());
}

TEST_F(ParameterServiceTest, MalformedPushesAreRefusedAndApplyNothing) {
  Start(ConsistencyMode::kAsync);
  const Slice other = partition_->SlicesOfServer(0).front();
  struct Case {
    std::function<void(std::vector<proto::PushRequest>&)> mutate;
    const char* text;
  };
  const Case cases[] = {
      // A chunk of the other server's slice, last in the stream: every
      // earlier chunk was fine and must not have been applied either.
      {[&](std::vector<proto::PushRequest>& p) {
         proto::TensorChunk* c = p.back().mutable_chunk();
         c->set_tensor_id(other.tensor_id);
         c->clear_shape();
         for (int64_t d : partition_->model().tensors[other.tensor_id].shape) {
           c->add_shape(d);
         }
         c->set_offset(other.offset);
       },
       "is outside this server's slices"},
      {[](std::vector<proto::PushRequest>& p) { p.pop_back(); },
       "push is incomplete"},
      {[](std::vector<proto::PushRequest>& p) { p.push_back(p.front()); },
       "overlaps elements already sent"},
      {[](std::vector<proto::PushRequest>& p) {
         p.back().mutable_chunk()->mutable_data()->append("xyz");
       },
       "bytes, expected"},
      {[](std::vector<proto::PushRequest>& p) { p.back().set_step(9); },
       "step changed within the push stream from 0 to 9"},
      {[](std::vector<proto::PushRequest>& p) {
         p.back().mutable_chunk()->set_dtype(proto::DTYPE_UNSPECIFIED);
       },
       "only DTYPE_FLOAT32"},
      {[](std::vector<proto::PushRequest>& p) { p.clear(); }, "no messages"},
  };
  for (const Case& c : cases) {
    std::vector<proto::PushRequest> push = ValidPush(0, 0, 1.0f);
    c.mutate(push);
    uint64_t version = 0;
    grpc::Status s = Push(push, &version);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.text;
    EXPECT_NE(s.error_message().find("push refused"), std::string::npos);
    EXPECT_NE(s.error_message().find(c.text), std::string::npos)
        << s.error_message();
    Weights weights;
    ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
    EXPECT_EQ(version, 0u);
    EXPECT_EQ(weights, InitialWeights()) << "a refused push changed weights";
  }
  // The same push, well formed, is applied at once in async mode.
  uint64_t version = 0;
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  EXPECT_EQ(version, 1u);
  const proto::StatsResponse stats = Stats();
  EXPECT_EQ(stats.version(), 1u);
  EXPECT_NE(stats.report().find("pushes: 1 ok, 7 refused"), std::string::npos)
      << stats.report();
  EXPECT_NE(stats.report().find("staleness (updates: 1"), std::string::npos)
      << stats.report();
}

TEST_F(ParameterServiceTest, SyncRefusesANonFinitePushWholeAndTakesAGoodOne) {
  Start(ConsistencyMode::kSync);
  uint64_t version = 0;
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    // One element of the last chunk: every earlier one was fine.
    std::vector<proto::PushRequest> push = ValidPush(1, 0, 3.0f);
    proto::TensorChunk* chunk = push.back().mutable_chunk();
    std::vector<float> values(chunk->num_elements(), 3.0f);
    values.back() = bad;
    EncodeFloats(values, chunk->mutable_data());
    grpc::Status s = Push(push, &version);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(
        s.error_message().find(absl::StrCat(
            "push refused: push message ", push.size() - 1, ": gradient of ",
            partition_->model().tensors[chunk->tensor_id()].name, " (tensor ",
            chunk->tensor_id(), ") element ",
            chunk->offset() + chunk->num_elements() - 1, " is ", bad)),
        std::string::npos)
        << s.error_message();
  }
  Weights weights;
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  EXPECT_EQ(version, 0u);
  EXPECT_EQ(weights, InitialWeights()) << "a refused push changed weights";
  // The step waited for rank 1, and takes its good push.
  ASSERT_TRUE(Push(ValidPush(1, 0, 3.0f), &version).ok());
  EXPECT_EQ(version, 1u);
  ASSERT_TRUE(Pull(1, 0, &weights, &version).ok());
  for (const auto& [key, w] : InitialWeights()) {
    EXPECT_FLOAT_EQ(weights[key], w - 2.0f);  // lr 1 * mean(1, 3)
  }
  EXPECT_NE(Stats().report().find("pushes: 2 ok, 2 refused"), std::string::npos)
      << Stats().report();
}

TEST_F(ParameterServiceTest, PushPullAnswersWithTheWeightsAfterItsPush) {
  Start(ConsistencyMode::kAsync);
  for (uint64_t max_chunk : {0, 7}) {
    const uint64_t step = max_chunk == 0 ? 0 : 1;
    Weights weights;
    uint64_t version = 0;
    ASSERT_TRUE(
        PushPull(ValidPush(0, step, 1.0f), max_chunk, &weights, &version).ok());
    EXPECT_EQ(version, step + 1);
    const Weights initial = InitialWeights();
    ASSERT_EQ(weights.size(), initial.size());
    for (const auto& [key, w] : initial) {
      EXPECT_FLOAT_EQ(weights[key], w - (step + 1.0f))
          << "max_chunk " << max_chunk;
    }
  }
  const proto::StatsResponse stats = Stats();
  EXPECT_NE(stats.report().find("pushes: 2 ok, 0 refused"), std::string::npos)
      << stats.report();
  EXPECT_NE(stats.report().find("pulls: 2 ok, 0 refused"), std::string::npos)
      << stats.report();
}

TEST_F(ParameterServiceTest, SyncPushPullWaitsForEveryRankOfItsStep) {
  Start(ConsistencyMode::kSync);
  Weights weights;
  uint64_t version = 0;
  grpc::Status status;
  std::thread rank0(
      [&] { status = PushPull(ValidPush(0, 0, 1.0f), 0, &weights, &version); });
  // Rank 0's call waits for the step, which needs rank 1's push.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(coordinator_->version(), 0u);
  uint64_t pushed = 0;
  ASSERT_TRUE(Push(ValidPush(1, 0, 3.0f), &pushed).ok());
  rank0.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(version, 1u);
  for (const auto& [key, w] : InitialWeights()) {
    EXPECT_FLOAT_EQ(weights[key], w - 2.0f);  // lr 1 * mean(1, 3)
  }
}

TEST_F(ParameterServiceTest, PushPullStandsForThePullItsWorkerMadeBefore) {
  // Rank 0's push for step 0 was lost here (say, in a restart of this
  // shard) and it took the weights for clock 1 with that call: its next
  // request is its push for step 1.
  Start(ConsistencyMode::kSync);
  uint64_t pushed = 0;
  ASSERT_TRUE(Push(ValidPush(1, 0, 3.0f), &pushed).ok());
  // A Push cannot say so: it is ahead. (Its cursor moves on from what this
  // shard took: only a restored shard takes a cursor further ahead.)
  EXPECT_EQ(Push(ValidPush(0, 1, 1.0f, /*batch=*/0), &pushed).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // A PushPull does: rank 0 takes part in step 0 with weight 0, then its
  // push for step 1 is taken and its pull waits for rank 1's.
  Weights weights;
  uint64_t version = 0;
  grpc::Status status;
  std::thread rank0([&] {
    status =
        PushPull(ValidPush(0, 1, 1.0f, /*batch=*/0), 0, &weights, &version);
  });
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (coordinator_->version() < 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(Push(ValidPush(1, 1, 5.0f), &pushed).ok());
  rank0.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(version, 2u);
  for (const auto& [key, w] : InitialWeights()) {
    // Step 0: rank 1's 3 alone; step 1: mean(1, 5).
    EXPECT_FLOAT_EQ(weights[key], w - 6.0f);
  }
}

TEST_F(ParameterServiceTest, PushPullWithARefusedPushPullsNothing) {
  Start(ConsistencyMode::kAsync);
  std::vector<proto::PushRequest> incomplete = ValidPush(0, 0, 1.0f);
  incomplete.pop_back();
  Weights weights;
  uint64_t version = 0;
  grpc::Status s = PushPull(incomplete, 0, &weights, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("push refused: push is incomplete"),
            std::string::npos)
      << s.error_message();
  EXPECT_TRUE(weights.empty());
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  EXPECT_EQ(version, 0u);
  EXPECT_EQ(weights, InitialWeights()) << "a refused push changed weights";
}

TEST_F(ParameterServiceTest, SyncRefusesAStaleStepWithAborted) {
  Start(ConsistencyMode::kSync);
  uint64_t version = 0;
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  ASSERT_TRUE(Push(ValidPush(1, 0, 1.0f), &version).ok());
  // Another batch for the step that completed.
  grpc::Status s = Push(ValidPush(1, 0, 1.0f, /*batch=*/1), &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_NE(s.error_message().find("stale step 0"), std::string::npos);
}

TEST_F(ParameterServiceTest, AReplayedPushIsAcknowledgedAndNotApplied) {
  Start(ConsistencyMode::kAsync);
  uint64_t version = 0;
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  EXPECT_EQ(version, 1u);
  // The same batch again (a worker resuming from another shard's progress).
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  EXPECT_EQ(version, 1u);
  Weights weights;
  ASSERT_TRUE(Pull(1, 0, &weights, &version).ok());
  for (auto& [key, w] : InitialWeights()) EXPECT_FLOAT_EQ(weights[key], w - 1);
  const proto::StatsResponse stats = Stats();
  EXPECT_NE(stats.report().find("examples per epoch: 0=8\n"), std::string::npos)
      << stats.report();
  EXPECT_NE(stats.report().find("replayed pushes acknowledged, not applied: 1"),
            std::string::npos)
      << stats.report();
}

TEST_F(ParameterServiceTest, HeartbeatsKeepAWorkerAliveAndNameItsProcess) {
  constexpr absl::Duration kLease = absl::Milliseconds(500);
  register_at_start_ = false;
  Start(ConsistencyMode::kSync, kLease);
  auto heartbeat = [&](int rank, uint64_t incarnation) {
    grpc::ClientContext context;
    proto::HeartbeatRequest request;
    *request.mutable_header() = Header(rank);
    request.set_incarnation(incarnation);
    proto::HeartbeatResponse response;
    return stub_->Heartbeat(&context, request, &response);
  };
  {
    grpc::ClientContext context;
    proto::RegisterRequest request;
    *request.mutable_header() = Header(0);
    ModelSpecToProto(model_, request.mutable_declaration());
    request.set_incarnation(5);
    proto::RegisterResponse response;
    ASSERT_TRUE(stub_->Register(&context, request, &response).ok());
  }
  // Rank 0 beats every 100 ms; rank 1 is silent and dies. Checked once
  // rank 1 is dead and rank 0 has beaten steadily for two leases (or after
  // a minute): a beat more than half a lease late (this thread stalled on a
  // loaded machine) could let even a renewed lease run out, so it starts
  // the count again.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  absl::Time last_beat = absl::Now();
  absl::Time steady_since = last_beat;
  std::vector<int> blocking;
  for (;;) {
    ASSERT_TRUE(heartbeat(0, 5).ok());
    // A stranger's beats for rank 1, which never registered, keep nothing
    // alive.
    const grpc::Status stranger = heartbeat(1, 9);
    EXPECT_EQ(stranger.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(stranger.error_message().find(
                  "worker 1 has not registered with this server"),
              std::string::npos)
        << stranger.error_message();
    absl::SleepFor(kLease / 5);
    blocking = coordinator_->RanksBlocking(1);
    const absl::Time now = absl::Now();
    if (now - last_beat > kLease / 2) steady_since = now;
    last_beat = now;
    if ((now - steady_since >= 2 * kLease &&
         blocking != std::vector<int>{0, 1}) ||
        now >= give_up) {
      break;
    }
  }
  EXPECT_EQ(blocking, std::vector<int>{0});
  grpc::Status stale = heartbeat(0, 4);
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(
      stale.error_message().find("worker 0 registered as incarnation 5, not 4"),
      std::string::npos)
      << stale.error_message();
  EXPECT_EQ(heartbeat(2, 5).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ParameterServiceTest, FinalPullAnswersOnceTheOtherRanksAreDone) {
  Start(ConsistencyMode::kAsync);
  grpc::Status status;
  Weights weights;
  uint64_t version = 0;
  absl::Notification answered;
  std::thread rank0([&] {
    proto::PullRequest request;
    *request.mutable_header() = Header(0);
    request.set_after_others_finish(true);
    status = SendPull(request, &weights, &version);
    answered.Notify();
  });
  // Rank 1's last step comes after rank 0 asked, and is in the answer.
  EXPECT_FALSE(
      answered.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  uint64_t pushed = 0;
  ASSERT_TRUE(Push(ValidPush(1, 0, 2.0f), &pushed).ok());
  EXPECT_FALSE(
      answered.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  Register(1, 11);
  ASSERT_TRUE(Done(1, 11).ok());
  rank0.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(version, 1u);
  for (const auto& [key, w] : InitialWeights()) {
    EXPECT_FLOAT_EQ(weights[key], w - 2.0f);
  }
}

TEST_F(ParameterServiceTest, DoneFromEveryRankSignalsShutdownOnce) {
  Start(ConsistencyMode::kSync);
  Register(0, 10);
  Register(1, 11);
  EXPECT_EQ(Done(1, 11, 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Done(1, 11).ok());
  ASSERT_TRUE(Done(1, 11).ok());
  EXPECT_FALSE(all_done_.HasBeenNotified());
  ASSERT_TRUE(Done(0, 10).ok());
  EXPECT_TRUE(all_done_.HasBeenNotified());
  ASSERT_TRUE(Done(0, 10).ok());  // Notifying twice would crash.
}

TEST_F(ParameterServiceTest, DoneOnlyFromTheProcessThatRegistered) {
  register_at_start_ = false;
  Start(ConsistencyMode::kSync);
  Register(0, 10);
  struct Case {
    int rank;
    uint64_t incarnation;
    const char* text;
  };
  for (const Case& c : {
           Case{1, 11, "worker 1 has not registered with this server"},
           Case{0, 0, "worker 0 registered as incarnation 10, not 0"},
           Case{0, 99, "worker 0 registered as incarnation 10, not 99"},
       }) {
    const grpc::Status s = Done(c.rank, c.incarnation);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << c.text;
    EXPECT_NE(s.error_message().find(c.text), std::string::npos)
        << s.error_message();
  }
  // Nothing was marked: the real rank 0 and rank 1 finish the job.
  EXPECT_NE(Stats().report().find("0=live 1=live"), std::string::npos)
      << Stats().report();
  Register(1, 11);
  ASSERT_TRUE(Done(0, 10).ok());
  EXPECT_FALSE(all_done_.HasBeenNotified());
  ASSERT_TRUE(Done(1, 11).ok());
  EXPECT_TRUE(all_done_.HasBeenNotified());
}

// Pull and Push parse their messages themselves (common/chunk_wire.h), so
// bytes that are no protobuf at all must be refused as cleanly as bad values.
TEST_F(ParameterServiceTest, UndecodableMessagesAreRefusedAndApplyNothing) {
  Start(ConsistencyMode::kAsync);
  grpc::GenericStub generic(channel_);
  const grpc::Slice garbage("\x3a\x05\x32\x10xxx", 7);  // data overruns
  auto call = [&](absl::string_view method,
                  const std::vector<grpc::ByteBuffer>& messages) {
    grpc::ClientContext context;
    ByteStreamCall stream(
        &generic, absl::StrCat("/ps.proto.ParameterServer/", method), &context);
    for (const grpc::ByteBuffer& m : messages) {
      if (!stream.Write(m)) break;
    }
    stream.WritesDone();
    grpc::ByteBuffer response;
    while (stream.Read(&response)) {
    }
    return stream.Finish();
  };

  std::vector<grpc::ByteBuffer> push;
  for (const proto::PushRequest& m : ValidPush(0, 0, 1.0f)) {
    push.push_back(SerializeMessage(m));
  }
  push.emplace_back(&garbage, 1);
  grpc::Status status = call("Push", push);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find(
                "push refused: malformed ps.proto.PushRequest"),
            std::string::npos)
      << status.error_message();

  const grpc::Slice cut_short("\x10\xff", 2);  // a varint that never ends
  status = call("Pull", {grpc::ByteBuffer(&cut_short, 1)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find(
                "pull refused: malformed ps.proto.PullRequest"),
            std::string::npos)
      << status.error_message();

  status = call("Pull", {});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("carried no PullRequest"),
            std::string::npos)
      << status.error_message();

  Weights weights;
  uint64_t version = 0;
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  EXPECT_EQ(version, 0u);
  EXPECT_EQ(weights, InitialWeights()) << "a refused push changed weights";
}

TEST_F(ParameterServiceTest, AnswersTheStandardHealthCheck) {
  Start(ConsistencyMode::kSync);
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);  // HealthCheckRequest{service: ""}
  grpc::ByteBuffer response;
  absl::Notification finished;
  grpc::Status status;
  generic.UnaryCall(&context, "/grpc.health.v1.Health/Check",
                    grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      status = std::move(s);
                      finished.Notify();
                    });
  finished.WaitForNotification();
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING
}

// A model whose "embedding" comes from rank 0, not from an initializer.
ModelSpec ModelWithValuesFromRank0() {
  ModelSpec m = MlpModelSpec({20, 30, 5}, kSeed);
  m.tensors.push_back(
      {"embedding/table", DType::kFloat32, {40}, InitializerSpec::FromRank0()});
  return m;
}

TEST_F(ParameterServiceTest, RanksWaitForRank0sDeclarationAndMustMatchIt) {
  declare_at_start_ = false;
  Start(ConsistencyMode::kSync);
  // Before any declaration: rank 1 is told to retry, the rest is refused.
  grpc::Status s = Declare(1, model_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("rank 0 has not declared the model yet"),
            std::string::npos)
      << s.error_message();
  Weights weights;
  uint64_t version = 0;
  s = Pull(0, 0, &weights, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("before any model was declared"),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(Stats().report().find("no model declared"), std::string::npos);

  ASSERT_TRUE(Declare(0, model_).ok());
  ASSERT_NE(store_, nullptr);
  ModelSpec other = model_;
  other.tensors[2].initializer = InitializerSpec::Normal(0, 1);
  s = Declare(1, other);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find(
                "tensor 2 \"fc1.weight\" initializer: normal(0, 1) declared "
                "by rank 1, glorot_uniform(fan_in 30, fan_out 5) by rank 0"),
            std::string::npos)
      << s.error_message();
  EXPECT_TRUE(Declare(1, model_).ok());
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  EXPECT_EQ(weights, InitialWeights());
}

TEST_F(ParameterServiceTest, ARankThatNeverRegisteredCanOnlyRegister) {
  register_at_start_ = false;
  Start(ConsistencyMode::kAsync);
  const Weights before = InitialWeights();
  Weights weights;
  uint64_t version = 0;
  for (const grpc::Status& s :
       {Pull(0, 0, &weights, &version), Push(ValidPush(0, 0, 1.0f), &version),
        PushPull(ValidPush(0, 0, 1.0f), 0, &weights, &version)}) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find("worker 0 has not registered"),
              std::string::npos)
        << s.error_message();
  }
  Register(0, Incarnation(0));
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  EXPECT_EQ(weights, before);
  // A request without the incarnation it registered with is refused too.
  proto::PullRequest request;
  *request.mutable_header() = Header(0);
  request.mutable_header()->clear_incarnation();
  const grpc::Status s = SendPull(request, &weights, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("carries no incarnation"), std::string::npos)
      << s.error_message();
}

TEST_F(ParameterServiceTest, ADeclarationOverTheLimitsIsRefused) {
  declare_at_start_ = false;
  limits_.max_model_bytes = 1000;
  Start(ConsistencyMode::kSync);
  const grpc::Status s = Declare(0, model_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("larger than the servers' limit of 1000 "
                                   "bytes (--max_model_bytes)"),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(host_->get(), nullptr);
}

TEST_F(ParameterServiceTest, Rank0sInitialValuesAreWhatEveryRankPulls) {
  model_ = ModelWithValuesFromRank0();
  declare_at_start_ = false;
  Start(ConsistencyMode::kSync);
  ASSERT_TRUE(Declare(0, model_).ok());
  const std::vector<Slice>& slices = partition_->SlicesOfServer(kServer);
  ASSERT_TRUE(std::any_of(slices.begin(), slices.end(), [](const Slice& s) {
    return s.tensor_id == 4;
  })) << "the test needs this shard to hold part of the embedding";
  // Until the values are in, rank 1 waits and rank 0 cannot pull.
  grpc::Status s = Declare(1, model_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find(
                "rank 0 has not sent the values of embedding/table yet"),
            std::string::npos)
      << s.error_message();
  Weights weights;
  uint64_t version = 0;
  s = Pull(0, 0, &weights, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // A gradient is refused meanwhile too.
  EXPECT_EQ(Push(ValidPush(0, 0, 1.0f), &version).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  // Initial values: only the embedding's elements, from rank 0, finite.
  auto values = [&](int rank, float first) {
    std::vector<proto::PushRequest> messages;
    for (const Slice& slice : slices) {
      if (slice.tensor_id != 4) continue;
      proto::PushRequest m;
      *m.mutable_header() = Header(rank);
      m.set_initial_values(true);
      proto::TensorChunk* c = m.mutable_chunk();
      c->set_tensor_id(4);
      c->set_dtype(proto::DTYPE_FLOAT32);
      c->add_shape(40);
      c->set_offset(slice.offset);
      c->set_num_elements(slice.num_elements);
      std::vector<float> v(slice.num_elements);
      for (size_t i = 0; i < v.size(); ++i) v[i] = first + 0.125f * i;
      EncodeFloats(v, c->mutable_data());
      messages.push_back(std::move(m));
    }
    return messages;
  };
  s = Push(values(1, 3.0f), &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("initial values come from rank 0"),
            std::string::npos)
      << s.error_message();
  std::vector<proto::PushRequest> with_nan = values(0, 3.0f);
  with_nan[0].mutable_chunk()->mutable_data()->replace(0, 4, "\0\0\xc0\x7f", 4);
  s = Push(with_nan, &version);
  EXPECT_NE(s.error_message().find("initial values must be finite"),
            std::string::npos)
      << s.error_message();
  std::vector<proto::PushRequest> gradient_too = values(0, 3.0f);
  for (proto::PushRequest m : ValidPush(0, 0, 1.0f)) {
    m.set_step(0);
    m.set_num_examples(0);
    m.set_examples_done(0);
    m.set_base_version(0);
    m.set_initial_values(true);
    if (m.chunk().tensor_id() != 4) gradient_too.push_back(m);
  }
  s = Push(gradient_too, &version);
  EXPECT_NE(s.error_message().find("taken only for tensors declared "
                                   "from_rank0"),
            std::string::npos)
      << s.error_message();

  ASSERT_TRUE(Push(values(0, 3.0f), &version).ok());
  // A restarted rank 0 sending other values changes nothing.
  ASSERT_TRUE(Push(values(0, -8.0f), &version).ok());
  ASSERT_TRUE(Declare(1, model_).ok());
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  for (const Slice& slice : slices) {
    if (slice.tensor_id != 4) continue;
    for (uint64_t i = 0; i < slice.num_elements; ++i) {
      EXPECT_EQ((weights[{4, slice.offset + i}]), 3.0f + 0.125f * i);
    }
  }
}

TEST_F(ParameterServiceTest, BarrierWaitsForEveryLiveRank) {
  Start(ConsistencyMode::kAsync);
  auto barrier = [this](int rank, uint64_t generation) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    proto::BarrierRequest request;
    *request.mutable_header() = Header(rank);
    request.set_generation(generation);
    proto::BarrierResponse response;
    return stub_->Barrier(&context, request, &response);
  };
  EXPECT_EQ(barrier(0, 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  std::atomic<bool> passed{false};
  std::thread rank0([&] {
    EXPECT_TRUE(barrier(0, 1).ok());
    passed = true;
  });
  // Rank 0 cannot pass before rank 1 arrives; once it has, both pass.
  EXPECT_FALSE(passed);
  EXPECT_TRUE(barrier(1, 1).ok());
  rank0.join();
  EXPECT_TRUE(passed);
}

}  // namespace
}  // namespace ps::server
