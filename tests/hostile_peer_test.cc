// Hostile and broken peers against the real server binary on 127.0.0.1: a
// client written against our proto sends each class of bad request, and the
// server refuses it with a status that says why, changes no weight and
// keeps serving the real workers. Every case prints one row of the table
// "class | request | status | weights unchanged | server alive".

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/parameter_client.h"
#include "common/byte_stream_call.h"
#include "common/chunk_wire.h"
#include "common/declaration_proto.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "tests/cluster_runner.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(60);
constexpr int kWorkers = 3;  // Rank 2 never registers: the stranger.
constexpr uint64_t kIncarnation = 77;
constexpr uint64_t kPlannedSteps = 100;

std::string Method(absl::string_view name) {
  return absl::StrCat("/", proto::ParameterServer::service_full_name(), "/",
                      name);
}

std::string CodeName(const grpc::Status& status) {
  return absl::StatusCodeToString(
      static_cast<absl::StatusCode>(status.error_code()));
}

// What a push says besides its values (PushRequest's fields).
struct PushFields {
  int rank = 1;
  uint64_t incarnation = kIncarnation;
  uint64_t step = 0;
  uint32_t num_examples = 32;
  uint64_t epoch = 0;
  uint64_t examples_done = 32;
};

class HostilePeerTest : public ::testing::Test {
 protected:
  // A one-shard server in `mode`, rank 0 declared through the client
  // library, rank 1 registered by hand with kIncarnation (the raw peer
  // speaks as it), rank 2 never registered.
  void StartServer(absl::string_view mode,
                   const std::vector<std::string>& extra_flags = {}) {
    const std::string port_file =
        TempPath(absl::StrCat("hostile-", mode, ".port"));
    std::filesystem::remove(port_file);
    SubprocessOptions options;
    options.argv = {RunfilePath("server/server"),
                    "--server_index=0",
                    "--num_servers=1",
                    absl::StrCat("--num_workers=", kWorkers),
                    absl::StrCat("--mode=", mode),
                    "--optimizer=sgd",
                    "--momentum=0",
                    "--learning_rate=0.1",
                    "--worker_timeout=600s",
                    "--port=0",
                    absl::StrCat("--port_file=", port_file)};
    options.argv.insert(options.argv.end(), extra_flags.begin(),
                        extra_flags.end());
    absl::StatusOr<std::unique_ptr<Subprocess>> started =
        Subprocess::Start(std::move(options));
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
    absl::StatusOr<int> port =
        WaitForPortFile(port_file, kTimeout, server_.get());
    ASSERT_TRUE(port.ok()) << port.status();
    address_ = absl::StrCat("127.0.0.1:", *port);

    channel_ =
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    stub_ = proto::ParameterServer::NewStub(channel_);
    generic_ = std::make_unique<grpc::GenericStub>(channel_);
    fingerprint_ = Partition::Create(model_, 1)->fingerprint();

    ClientOptions client_options;
    client_options.servers = {address_};
    client_options.rank = 0;
    client_options.retry_timeout = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<ParameterClient>> client =
        ParameterClient::Connect(client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    rank0_ = *std::move(client);
    ASSERT_TRUE(rank0_->Declare(model_, kPlannedSteps).ok());

    proto::RegisterRequest request;
    *request.mutable_header() = Header(1, kIncarnation);
    ModelSpecToProto(model_, request.mutable_declaration());
    request.set_incarnation(kIncarnation);
    request.set_planned_steps(kPlannedSteps);
    proto::RegisterResponse response;
    grpc::ClientContext context;
    const grpc::Status registered =
        stub_->Register(&context, request, &response);
    ASSERT_TRUE(registered.ok()) << registered.error_message();
    ASSERT_TRUE(Snapshot(&before_).ok());
  }

  proto::RequestHeader Header(int rank, uint64_t incarnation) const {
    proto::RequestHeader header;
    header.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
    header.set_partition_fingerprint(fingerprint_);
    header.set_worker_rank(rank);
    header.set_server_index(0);
    header.set_incarnation(incarnation);
    return header;
  }

  // The weights and version, through rank 0's client.
  struct Weights {
    TensorValues values;
    uint64_t version = 0;
  };
  absl::Status Snapshot(Weights* out) {
    absl::StatusOr<uint64_t> version = rank0_->Pull(0, out->values);
    if (!version.ok()) return version.status();
    out->version = *version;
    return absl::OkStatus();
  }

  // Whether the weights still hold the bits of `before_`.
  bool WeightsUnchanged() {
    Weights now;
    if (!Snapshot(&now).ok() || now.version != before_.version) return false;
    for (size_t t = 0; t < now.values.size(); ++t) {
      if (now.values[t].size() != before_.values[t].size() ||
          std::memcmp(now.values[t].data(), before_.values[t].data(),
                      now.values[t].size() * sizeof(float)) != 0) {
        return false;
      }
    }
    return true;
  }

  // The server answers Stats and is still running.
  bool Alive() {
    proto::StatsRequest request;
    proto::StatsResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kTimeout));
    return !server_->TryWait().has_value() &&
           stub_->Stats(&context, request, &response).ok();
  }

  // Checks and prints one row of the table.
  void ExpectRefusedRow(absl::string_view kind, absl::string_view request,
                        const grpc::Status& status,
                        const std::vector<grpc::StatusCode>& codes,
                        absl::string_view names) {
    const bool unchanged = WeightsUnchanged();
    const bool alive = Alive();
    std::printf("| %s | %s | %s: %s | %s | %s |\n", std::string(kind).c_str(),
                std::string(request).c_str(), CodeName(status).c_str(),
                status.error_message().c_str(), unchanged ? "yes" : "NO",
                alive ? "yes" : "NO");
    std::fflush(stdout);
    EXPECT_THAT(codes, ::testing::Contains(status.error_code()))
        << request << ": " << CodeName(status) << " " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(std::string(names)))
        << request;
    EXPECT_TRUE(unchanged) << request << " changed the weights";
    EXPECT_TRUE(alive) << request << " stopped the server";
  }

  // One push of `gradients` (one vector per tensor), each tensor one chunk.
  grpc::Status Push(const PushFields& fields, const TensorValues& gradients) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kTimeout));
    ByteStreamCall call(generic_.get(), Method("Push"), &context);
    for (size_t t = 0; t < gradients.size(); ++t) {
      const grpc::ByteBuffer message = PushMessage(fields, t, gradients[t]);
      const bool last = t + 1 == gradients.size();
      if (!(last ? call.WriteLast(message) : call.Write(message))) break;
    }
    grpc::ByteBuffer response;
    call.Read(&response);
    return call.Finish();
  }

  grpc::ByteBuffer PushMessage(const PushFields& fields, size_t tensor,
                               absl::Span<const float> values) const {
    proto::PushRequest message;
    *message.mutable_header() = Header(fields.rank, fields.incarnation);
    message.set_step(fields.step);
    message.set_num_examples(fields.num_examples);
    message.set_epoch(fields.epoch);
    message.set_examples_done(fields.examples_done);
    proto::TensorChunk chunk;
    chunk.set_tensor_id(tensor);
    chunk.set_dtype(proto::DTYPE_FLOAT32);
    for (int64_t d : model_.tensors[tensor].shape) chunk.add_shape(d);
    chunk.set_num_elements(values.size());
    return SerializeChunkMessage(
        message, chunk, kPushRequestChunk,
        OwnedSlice(std::string(reinterpret_cast<const char*>(values.data()),
                               values.size() * sizeof(float))));
  }

  TensorValues Gradients(float value) const {
    TensorValues gradients;
    for (const TensorSpec& tensor : model_.tensors) {
      gradients.emplace_back(tensor.num_elements(), value);
    }
    return gradients;
  }

  const ModelSpec model_ = MlpModelSpec({8, 4, 2});
  std::unique_ptr<Subprocess> server_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
  std::unique_ptr<grpc::GenericStub> generic_;
  uint64_t fingerprint_ = 0;
  std::unique_ptr<ParameterClient> rank0_;
  Weights before_;
};

TEST_F(HostilePeerTest, NonFiniteGradientsAreRefusedWhole) {
  for (absl::string_view mode : {"async", "sync"}) {
    SCOPED_TRACE(mode);
    StartServer(mode);
    for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
      TensorValues gradients = Gradients(0.01f);
      gradients[2][3] = bad;
      ExpectRefusedRow(
          "non-finite gradient",
          absl::StrCat(mode, " push, fc1.weight[3] = ", bad, ", rest 0.01"),
          Push(PushFields(), gradients), {grpc::StatusCode::INVALID_ARGUMENT},
          "fc1.weight (tensor 2) element 3");
    }
    // The same rank's good push of that step is taken.
    ASSERT_TRUE(Push(PushFields(), Gradients(0.01f)).ok());
    server_.reset();
  }
}

TEST_F(HostilePeerTest, LifecycleCallsAreCheckedAgainstTheRegistration) {
  StartServer("async");
  struct Case {
    std::string request;
    int rank;
    uint64_t incarnation;
  };
  for (const Case& c : {Case{"from rank 2, never registered", 2, 1},
                        Case{"from rank 1, another incarnation", 1, 5},
                        Case{"from rank 1, incarnation 0", 1, 0}}) {
    {
      proto::DoneRequest request;
      *request.mutable_header() = Header(c.rank, c.incarnation);
      proto::DoneResponse response;
      grpc::ClientContext context;
      ExpectRefusedRow("lifecycle", absl::StrCat("Done ", c.request),
                       stub_->Done(&context, request, &response),
                       {grpc::StatusCode::FAILED_PRECONDITION,
                        grpc::StatusCode::INVALID_ARGUMENT},
                       absl::StrCat("worker ", c.rank));
    }
    {
      proto::HeartbeatRequest request;
      *request.mutable_header() = Header(c.rank, c.incarnation);
      request.set_incarnation(c.incarnation);
      proto::HeartbeatResponse response;
      grpc::ClientContext context;
      ExpectRefusedRow("lifecycle", absl::StrCat("Heartbeat ", c.request),
                       stub_->Heartbeat(&context, request, &response),
                       {grpc::StatusCode::FAILED_PRECONDITION,
                        grpc::StatusCode::INVALID_ARGUMENT},
                       absl::StrCat("worker ", c.rank));
    }
    PushFields fields;
    fields.rank = c.rank;
    fields.incarnation = c.incarnation;
    ExpectRefusedRow("lifecycle", absl::StrCat("Push ", c.request),
                     Push(fields, Gradients(0.01f)),
                     {grpc::StatusCode::FAILED_PRECONDITION,
                      grpc::StatusCode::INVALID_ARGUMENT},
                     absl::StrCat("worker ", c.rank));
  }
  // The real ranks were not kicked out: rank 1's push is applied.
  ASSERT_TRUE(Push(PushFields(), Gradients(0.01f)).ok());
  Weights after;
  ASSERT_TRUE(Snapshot(&after).ok());
  EXPECT_EQ(after.version, before_.version + 1);
}

TEST_F(HostilePeerTest, ValuesNoWorkerSendsAreRefusedAndTheRankGoesOn) {
  StartServer("async");
  constexpr uint64_t kHuge = uint64_t{1} << 63;
  struct Case {
    std::string request;
    PushFields fields;
    std::string names;
  };
  PushFields far_step;
  far_step.step = kHuge;
  PushFields far_cursor;
  far_cursor.examples_done = ~uint64_t{0};
  PushFields far_epoch;
  far_epoch.epoch = uint64_t{1} << 40;
  for (const Case& c :
       {Case{"push for step 2^63", far_step, "step 9223372036854775808"},
        Case{"push with examples_done 2^64-1", far_cursor, "examples_done"},
        Case{"push in epoch 2^40", far_epoch, "skips epochs"}}) {
    ExpectRefusedRow("out of range", c.request,
                     Push(c.fields, Gradients(0.01f)),
                     {grpc::StatusCode::INVALID_ARGUMENT}, c.names);
  }
  {
    proto::HeartbeatRequest request;
    *request.mutable_header() = Header(1, kIncarnation);
    request.set_incarnation(kIncarnation);
    request.set_clock(kHuge);
    proto::HeartbeatResponse response;
    grpc::ClientContext context;
    ExpectRefusedRow("out of range", "Heartbeat with clock 2^63",
                     stub_->Heartbeat(&context, request, &response),
                     {grpc::StatusCode::INVALID_ARGUMENT}, "clock");
  }
  {
    proto::PullRequest request;
    *request.mutable_header() = Header(1, kIncarnation);
    request.set_clock(kHuge);
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<proto::PullResponse>> reader =
        stub_->Pull(&context, request);
    proto::PullResponse response;
    while (reader->Read(&response)) {
    }
    ExpectRefusedRow("out of range", "pull for clock 2^63", reader->Finish(),
                     {grpc::StatusCode::INVALID_ARGUMENT}, "clock");
  }
  // None of them moved rank 1: its real first push is taken and applied.
  ASSERT_TRUE(Push(PushFields(), Gradients(0.01f)).ok());
  Weights after;
  ASSERT_TRUE(Snapshot(&after).ok());
  EXPECT_EQ(after.version, before_.version + 1);
}

TEST_F(HostilePeerTest, AHalfSentPushIsCancelledOnceIdle) {
  StartServer("async", {"--stream_idle_timeout=1s"});
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kTimeout));
  ByteStreamCall call(generic_.get(), Method("Push"), &context);
  // The first tensor of four, then nothing.
  ASSERT_TRUE(call.Write(PushMessage(PushFields(), 0, Gradients(0.01f)[0])));
  grpc::ByteBuffer response;
  EXPECT_FALSE(call.Read(&response));
  const grpc::Status status = call.Finish();
  ExpectRefusedRow("resources", "push sending 1 of 4 tensors, then idle",
                   status, {grpc::StatusCode::CANCELLED}, "");
  // Rank 1's real push goes through.
  ASSERT_TRUE(Push(PushFields(), Gradients(0.01f)).ok());
}

TEST_F(HostilePeerTest, MalformedRequestsAreRefusedNamingTheProblem) {
  StartServer("async");
  {
    // A unary call whose bytes are no protobuf message.
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kTimeout));
    ByteStreamCall call(generic_.get(), Method("Register"), &context);
    grpc::Slice garbage = OwnedSlice(std::string("\xff\xff\xff\xff\x0f", 5));
    call.WriteLast(grpc::ByteBuffer(&garbage, 1));
    grpc::ByteBuffer response;
    call.Read(&response);
    const grpc::Status status = call.Finish();
    std::printf(
        "| malformed | Register with 5 bytes of garbage | %s: %s | - | - |\n",
        CodeName(status).c_str(), status.error_message().c_str());
    std::fflush(stdout);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(),
                HasSubstr("malformed ps.proto.RegisterRequest"));
    EXPECT_TRUE(Alive());
  }
  {
    // A chunk that covers only part of the tensor it claims.
    TensorValues gradients = Gradients(0.01f);
    gradients[0].resize(5);
    ExpectRefusedRow("malformed", "push missing most of fc0.weight",
                     Push(PushFields(), gradients),
                     {grpc::StatusCode::INVALID_ARGUMENT}, "tensor 0 chunk");
  }
  {
    // A pull asking for one-element chunks.
    proto::PullRequest request;
    *request.mutable_header() = Header(1, kIncarnation);
    request.set_max_chunk_elements(1);
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<proto::PullResponse>> reader =
        stub_->Pull(&context, request);
    proto::PullResponse response;
    int messages = 0;
    while (reader->Read(&response)) ++messages;
    ExpectRefusedRow("malformed", "pull with max_chunk_elements 1",
                     reader->Finish(), {grpc::StatusCode::INVALID_ARGUMENT},
                     "max_chunk_elements");
    EXPECT_EQ(messages, 0);
  }
}

}  // namespace
}  // namespace ps::testing
