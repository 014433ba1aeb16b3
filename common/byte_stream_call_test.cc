#include "common/byte_stream_call.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"

namespace ps {
namespace {

// A server on 127.0.0.1 with gRPC's standard health service (and a
// ParameterServer whose methods are all unimplemented: a synchronous server
// needs one service of its own).
class ByteStreamCallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&unimplemented_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = std::make_unique<grpc::GenericStub>(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override { server_->Shutdown(); }

  static grpc::ByteBuffer Bytes(const std::string& s) {
    grpc::Slice slice(s);
    return grpc::ByteBuffer(&slice, 1);
  }

  proto::ParameterServer::Service unimplemented_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST_F(ByteStreamCallTest, ExchangesMessagesWithAServer) {
  grpc::ClientContext context;
  ByteStreamCall call(stub_.get(), "/grpc.health.v1.Health/Check", &context);
  ASSERT_TRUE(call.WriteLast(Bytes("")));  // HealthCheckRequest{service: ""}
  grpc::ByteBuffer response;
  ASSERT_TRUE(call.Read(&response));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(slices[0].begin()),
                        slices[0].size()),
            std::string("\x08\x01", 2));  // status: SERVING
  EXPECT_FALSE(call.Read(&response));     // A unary call answers once.
  EXPECT_TRUE(call.Finish().ok());
}

TEST_F(ByteStreamCallTest, AnUnknownMethodFailsInFinish) {
  grpc::ClientContext context;
  ByteStreamCall call(stub_.get(), "/no.Such/Method", &context);
  call.WriteLast(Bytes("x"));
  grpc::ByteBuffer response;
  EXPECT_FALSE(call.Read(&response));
  EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(ByteStreamCallTest, DestroyingAnUnfinishedCallCancelsIt) {
  // Watch streams until cancelled. Destroying the call mid-stream must not
  // hang, and must end the call on the server too: TearDown's Shutdown
  // (no deadline) waits for every call, so a call left open would time
  // the test out.
  grpc::ClientContext context;
  ByteStreamCall call(stub_.get(), "/grpc.health.v1.Health/Watch", &context);
  ASSERT_TRUE(call.WriteLast(Bytes("")));
  grpc::ByteBuffer update;
  ASSERT_TRUE(call.Read(&update));  // The first status update.
}

TEST_F(ByteStreamCallTest, AReadBeforeAnyWriteFailsInsteadOfWaiting) {
  // The call's metadata waits for the first write, so the server does not
  // know of the call yet; a read could only wait forever.
  grpc::ClientContext context;
  ByteStreamCall call(stub_.get(), "/grpc.health.v1.Health/Watch", &context);
  grpc::ByteBuffer update;
  EXPECT_FALSE(call.Read(&update));
  // The call still works once written to.
  ASSERT_TRUE(call.WriteLast(Bytes("")));
  EXPECT_TRUE(call.Read(&update));
}

TEST_F(ByteStreamCallTest, DestroyingACallNeverWrittenToDoesNotHang) {
  // Its metadata never left (corked); cancelling it must still end it.
  grpc::ClientContext context;
  ByteStreamCall call(stub_.get(), "/grpc.health.v1.Health/Watch", &context);
}

TEST_F(ByteStreamCallTest, ACancelledCallFailsEveryOperation) {
  grpc::ClientContext context;
  context.TryCancel();  // Before the call exists: it is cancelled at start.
  ByteStreamCall call(stub_.get(), "/grpc.health.v1.Health/Watch", &context);
  grpc::ByteBuffer update;
  EXPECT_FALSE(call.WriteLast(Bytes("")));
  EXPECT_FALSE(call.Read(&update));
  EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::CANCELLED);
}

}  // namespace
}  // namespace ps
