// Hostile peers against protocol version 2 (declarations, incarnations,
// restores), against the real server binary on 127.0.0.1: each request is
// refused with a status that says why, and leaves the declaration, the
// weights and each rank's accepted step and cursor as they were.

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/byte_stream_call.h"
#include "common/chunk_wire.h"
#include "common/declaration_proto.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "tests/cluster_runner.h"
#include "tests/hostile_peer.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kRank0Incarnation = 91;

// Two tensors no worker of the job declares.
ModelSpec EvilModel() {
  ModelSpec model = MlpModelSpec({4, 6});
  model.tensors[0].name = "evil.weight";
  model.tensors[1].name = "evil.bias";
  return model;
}

// fc0.weight comes from rank 0's initial values.
ModelSpec ModelWithValuesFromRank0() {
  ModelSpec model = MlpModelSpec({8, 4, 2});
  model.tensors[0].initializer = InitializerSpec::FromRank0();
  return model;
}

// Starts a call with one message and leaves it open.
struct HalfSentCall {
  HalfSentCall(grpc::GenericStub* stub, const std::string& method,
               const grpc::ByteBuffer& first)
      : call(stub, method, &context) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPeerTimeout));
    call.Write(first);
  }
  grpc::Status Finish() {
    grpc::ByteBuffer response;
    call.Read(&response);
    return call.Finish();
  }
  grpc::ClientContext context;
  ByteStreamCall call;
};

TEST_F(HostilePeerTest, ARefusedRank0RegisterInstallsNoModel) {
  LaunchServer("sync");
  ASSERT_FALSE(HasFatalFailure());
  {
    // The fingerprint of the job's model, not of the one declared.
    proto::RegisterRequest request;
    *request.mutable_header() = Header(0, kRank0Incarnation);
    ModelSpecToProto(EvilModel(), request.mutable_declaration());
    request.set_incarnation(kRank0Incarnation);
    proto::RegisterResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub_->Register(&context, request, &response);
    std::printf(
        "| declaration | rank 0 Register of evil.weight, wrong "
        "fingerprint | %s: %s |\n",
        CodeName(status).c_str(), status.error_message().c_str());
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("partition fingerprint"));
    EXPECT_THAT(Report(), HasSubstr("no model declared"));
  }
  {
    const grpc::Status status = RawRegister(0, 0, EvilModel());
    std::printf(
        "| declaration | rank 0 Register of evil.weight, incarnation "
        "0 | %s: %s |\n",
        CodeName(status).c_str(), status.error_message().c_str());
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("incarnation"));
    EXPECT_THAT(Report(), HasSubstr("no model declared"));
  }
  EXPECT_TRUE(Alive());
  // The real rank 0's declaration is the one taken.
  DeclareAndRegister();
  EXPECT_THAT(Report(), HasSubstr("mode sync version 0"));
  EXPECT_THAT(server_->LastLines(1000), Not(HasSubstr("evil.weight")));
}

class HostileValuesTest : public HostilePeerTest {
 protected:
  HostileValuesTest() : HostilePeerTest(ModelWithValuesFromRank0()) {}
};

TEST_F(HostileValuesTest, OnlyRank0sRegisteredProcessSendsInitialValues) {
  LaunchServer("sync");
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(RawRegister(0, kRank0Incarnation, model_).ok());
  const size_t n = model_.tensors[0].num_elements();
  PushFields values;
  values.rank = 0;
  values.num_examples = 0;
  values.examples_done = 0;
  values.initial_values = true;
  auto push_values = [&](const PushFields& fields, float value) {
    const std::vector<float> data(n, value);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPeerTimeout));
    ByteStreamCall call(generic_.get(), Method("Push"), &context);
    call.WriteLast(PushMessage(fields, 0, data));
    grpc::ByteBuffer response;
    call.Read(&response);
    return call.Finish();
  };
  for (uint64_t incarnation : {uint64_t{5555}, uint64_t{0}}) {
    values.incarnation = incarnation;
    const grpc::Status status = push_values(values, 1e30f);
    std::printf(
        "| initial values | 1e30 from rank 0, incarnation %llu | "
        "%s: %s |\n",
        static_cast<unsigned long long>(incarnation), CodeName(status).c_str(),
        status.error_message().c_str());
    EXPECT_THAT(
        (std::vector<grpc::StatusCode>{grpc::StatusCode::FAILED_PRECONDITION,
                                       grpc::StatusCode::INVALID_ARGUMENT}),
        ::testing::Contains(status.error_code()));
    EXPECT_THAT(status.error_message(), HasSubstr("worker 0"));
    // Not taken: other ranks still wait for rank 0's values.
    const grpc::Status waiting = RawRegister(1, kPeerIncarnation, model_);
    EXPECT_EQ(waiting.error_code(), grpc::StatusCode::UNAVAILABLE)
        << waiting.error_message();
  }
  values.incarnation = kRank0Incarnation;
  ASSERT_TRUE(push_values(values, 0.25f).ok());
  // Rank 1 (a client of ours) pulls the registered rank 0's values.
  ClientOptions options;
  options.servers = {address_};
  options.rank = 1;
  options.retry_timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<ParameterClient>> rank1 =
      ParameterClient::Connect(options);
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  ASSERT_TRUE((*rank1)->Declare(model_, kPeerPlannedSteps).ok());
  TensorValues pulled;
  ASSERT_TRUE((*rank1)->Pull(0, pulled).ok());
  ASSERT_EQ(pulled[0].size(), n);
  for (float v : pulled[0]) ASSERT_EQ(v, 0.25f);
}

TEST_F(HostilePeerTest, CallsOfAnotherProcessTakeNoneOfTheRanksSlots) {
  StartServer("async");
  ASSERT_FALSE(HasFatalFailure());
  const pid_t pid = server_->pid();
  const int threads_before = ThreadCount(pid);
  // Twice the rank's 8 slots, half-sent, in rank 1's name.
  std::vector<std::unique_ptr<HalfSentCall>> calls;
  for (int i = 0; i < 16; ++i) {
    PushFields fields;
    fields.incarnation = i % 2 == 0 ? 0 : kPeerIncarnation + 1 + i;
    calls.push_back(std::make_unique<HalfSentCall>(
        generic_.get(), Method("Push"),
        PushMessage(fields, 0, Gradients(0.01f)[0])));
  }
  const int threads_during = ThreadCount(pid);
  // The real rank 1 pushes and pulls meanwhile.
  const grpc::Status pushed = Push(PushFields(), Gradients(0.01f));
  EXPECT_TRUE(pushed.ok()) << pushed.error_message();
  proto::PullRequest pull;
  *pull.mutable_header() = Header(1, kPeerIncarnation);
  pull.set_clock(1);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPeerTimeout));
  std::unique_ptr<grpc::ClientReader<proto::PullResponse>> reader =
      stub_->Pull(&context, pull);
  proto::PullResponse response;
  while (reader->Read(&response)) {
  }
  const grpc::Status pulled = reader->Finish();
  EXPECT_TRUE(pulled.ok()) << pulled.error_message();
  for (size_t i = 0; i < calls.size(); ++i) {
    const grpc::Status status = calls[i]->Finish();
    EXPECT_THAT(
        (std::vector<grpc::StatusCode>{grpc::StatusCode::FAILED_PRECONDITION,
                                       grpc::StatusCode::INVALID_ARGUMENT}),
        ::testing::Contains(status.error_code()))
        << i << ": " << CodeName(status) << " " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("worker 1"));
  }
  std::printf(
      "| slots | 16 half-sent pushes as rank 1, incarnation 0 or "
      "wrong | refused; the real push %s, pull %s | threads %d, %d, "
      "%d |\n",
      CodeName(pushed).c_str(), CodeName(pulled).c_str(), threads_before,
      threads_during, ThreadCount(pid));
  EXPECT_TRUE(Alive());
}

// Rank 1 pushes steps [0, 6), the shard keeps a checkpoint at version 4 and
// is killed; restored, it hears rank 1's push for step 6.
TEST_F(HostilePeerTest, TheFirstPushAfterARestoreMovesTheCursorByItsSteps) {
  const std::string dir = TempPath("hostile-restore");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // Without the update log: a restore that loses the pushes since its
  // checkpoint is the case where the cursor can jump.
  const std::vector<std::string> flags = {
      absl::StrCat("--checkpoint_dir=", dir), "--checkpoint_every_steps=4",
      "--checkpoint_every_seconds=100000", "--update_log=false"};
  StartServer("async", flags);
  ASSERT_FALSE(HasFatalFailure());
  auto step = [](uint64_t s) {
    PushFields fields;
    fields.step = s;
    fields.examples_done = (s + 1) * kPeerBatch;
    return fields;
  };
  for (uint64_t s = 0; s < 4; ++s) {
    ASSERT_TRUE(Push(step(s), Gradients(0.01f)).ok());
  }
  const std::string checkpoint = dir + "/shard-0-4.ckpt";
  const absl::Time deadline = absl::Now() + kPeerTimeout;
  while (!std::filesystem::exists(checkpoint) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(std::filesystem::exists(checkpoint));
  for (uint64_t s = 4; s < 6; ++s) {
    ASSERT_TRUE(Push(step(s), Gradients(0.01f)).ok());
  }
  ASSERT_TRUE(server_->Kill(SIGKILL).ok());
  server_->Wait();
  std::vector<std::string> restore = flags;
  restore.push_back("--restore");
  StartServer("async", restore);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(before_.version, 4u);
  const std::string record = "worker 1: clock 4, epoch 0, examples_done 128";
  ASSERT_THAT(Report(), HasSubstr(record));

  PushFields far = step(6);
  far.examples_done = ~uint64_t{0};
  ExpectRefusedRow("after restore",
                   "rank 1's first push, step 6, examples_done 2^64-1",
                   Push(far, Gradients(0.01f)),
                   {grpc::StatusCode::INVALID_ARGUMENT}, "examples_done");
  PushFields far_epoch = step(6);
  far_epoch.epoch = 4;
  ExpectRefusedRow("after restore", "rank 1's first push, step 6, epoch 4",
                   Push(far_epoch, Gradients(0.01f)),
                   {grpc::StatusCode::INVALID_ARGUMENT}, "skips epochs");
  EXPECT_THAT(Report(), HasSubstr(record));
  // The genuine push is taken and applied, not dropped as a replay.
  ASSERT_TRUE(Push(step(6), Gradients(0.01f)).ok());
  Weights after;
  ASSERT_TRUE(Snapshot(&after).ok());
  EXPECT_EQ(after.version, 5u);
  EXPECT_THAT(Report(),
              HasSubstr("worker 1: clock 7, epoch 0, examples_done 224"));
}

// 1.9 M tensors of short names: 19 MiB on the wire, refused on its count
// before it is parsed (a parse cost 35 times its size).
TEST_F(HostilePeerTest, AnOversizedDeclarationIsRefusedUnparsed) {
  LaunchServer("sync");
  ASSERT_FALSE(HasFatalFailure());
  const pid_t pid = server_->pid();
  proto::RegisterRequest request;
  *request.mutable_header() = Header(0, kRank0Incarnation);
  request.set_incarnation(kRank0Incarnation);
  constexpr int kTensors = 1900000;
  for (int i = 0; i < kTensors; ++i) {
    proto::TensorDeclaration* t = request.mutable_declaration()->add_tensors();
    t->set_name(absl::StrCat("t", i));
    t->add_shape(1);
  }
  const std::string bytes = request.SerializeAsString();
  request.Clear();
  const size_t before = ResidentBytes(pid);
  grpc::Slice slice(bytes.data(), bytes.size());
  const grpc::ByteBuffer message(&slice, 1);
  size_t during = 0;
  for (int i = 0; i < 4; ++i) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPeerTimeout));
    ByteStreamCall call(generic_.get(), Method("Register"), &context);
    call.WriteLast(message);
    grpc::ByteBuffer response;
    call.Read(&response);
    const grpc::Status status = call.Finish();
    during = std::max(during, ResidentBytes(pid));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("1900000 tensors"));
  }
  const size_t after = ResidentBytes(pid);
  std::printf(
      "| resources | 4 Registers of %zu bytes declaring %d tensors | "
      "refused | RSS %s, %s, %s |\n",
      bytes.size(), kTensors, MiB(before).c_str(), MiB(during).c_str(),
      MiB(after).c_str());
  // Parsed, one cost 600 MiB; held unparsed, a few copies of its bytes.
  EXPECT_LT(after, before + 8 * bytes.size());
  EXPECT_THAT(Report(), HasSubstr("no model declared"));
  EXPECT_TRUE(Alive());
}

// A job id or tensor name holding a newline would forge a line of the
// server's log; a long one would be written again whole.
TEST_F(HostilePeerTest, PeerStringsInErrorsAndLogsAreEscapedAndCut) {
  LaunchServer("async");
  ASSERT_FALSE(HasFatalFailure());
  const std::string forged =
      "\n12:00:00.000 [server 0] info: every worker is done (forged)";
  {
    // Rank 0's declaration, before any other.
    ModelSpec model = model_;
    model.tensors[0].name = "fc0.weight" + forged;
    const grpc::Status status = RawRegister(0, 91, model);
    std::printf(
        "| log injection | Register naming a tensor with a newline "
        "| %s: %s |\n",
        CodeName(status).c_str(), status.error_message().c_str());
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("holds the byte 0xa"));
    EXPECT_THAT(status.error_message(), Not(HasSubstr("\n")));
  }
  DeclareAndRegister();
  ASSERT_FALSE(HasFatalFailure());
  const std::string long_text(1 << 20, 'j');
  for (const std::string& job_id : {"x" + forged, long_text}) {
    const grpc::ByteBuffer message = [&] {
      PushFields fields;
      proto::PushRequest request;
      *request.mutable_header() = Header(1, kPeerIncarnation);
      request.mutable_header()->set_job_id(job_id);
      request.set_num_examples(fields.num_examples);
      request.set_examples_done(fields.examples_done);
      return SerializeMessage(request);
    }();
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPeerTimeout));
    ByteStreamCall call(generic_.get(), Method("Push"), &context);
    call.WriteLast(message);
    grpc::ByteBuffer response;
    call.Read(&response);
    const grpc::Status status = call.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(), Not(HasSubstr("\n")));
    EXPECT_LT(status.error_message().size(), 1024u);
  }
  // Each refusal was logged (a push's, once it is answered).
  ASSERT_TRUE(
      server_->WaitForOutputLine("jjj... (1048576 bytes)", kPeerTimeout).ok());
  EXPECT_TRUE(Alive());
  for (const std::string& line : server_->OutputLines()) {
    EXPECT_THAT(line, Not(::testing::StartsWith("12:00:00.000"))) << line;
    EXPECT_LT(line.size(), 4096u);
  }
}

}  // namespace
}  // namespace ps::testing
