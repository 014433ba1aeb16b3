// Hostile and broken peers against the real server binary on 127.0.0.1: a
// client written against our proto sends each class of bad request, and the
// server refuses it with a status that says why, changes no weight and
// keeps serving the real workers. Every case prints one row of the table
// "class | request | status | weights unchanged | server alive".

#include "tests/hostile_peer.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/byte_stream_call.h"
#include "common/chunk_wire.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;

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
    *request.mutable_header() = Header(1, kPeerIncarnation);
    request.set_incarnation(kPeerIncarnation);
    request.set_clock(kHuge);
    proto::HeartbeatResponse response;
    grpc::ClientContext context;
    ExpectRefusedRow("out of range", "Heartbeat with clock 2^63",
                     stub_->Heartbeat(&context, request, &response),
                     {grpc::StatusCode::INVALID_ARGUMENT}, "clock");
  }
  {
    proto::PullRequest request;
    *request.mutable_header() = Header(1, kPeerIncarnation);
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

// One push claiming 2^32-1 examples would be the whole of a sync step's
// example-weighted average.
TEST_F(HostilePeerTest, APushBeyondTheRanksBatchIsRefused) {
  StartServer("sync");
  PushFields huge;
  huge.num_examples = ~uint32_t{0};
  huge.examples_done = huge.num_examples;  // The cursor moves by as many.
  ExpectRefusedRow("out of range",
                   "sync push with num_examples 2^32-1 (rank registered a "
                   "batch of 32)",
                   Push(huge, Gradients(0.01f)),
                   {grpc::StatusCode::INVALID_ARGUMENT}, "num_examples");
  // The same step with the rank's real batch is taken.
  ASSERT_TRUE(Push(PushFields(), Gradients(0.01f)).ok());
}

TEST_F(HostilePeerTest, AHalfSentPushIsCancelledOnceIdle) {
  StartServer("async", {"--stream_idle_timeout=1s"});
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPeerTimeout));
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
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPeerTimeout));
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
    *request.mutable_header() = Header(1, kPeerIncarnation);
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
