#include "server/blocking_stream_service.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/byte_stream_call.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/byte_stream_testing.h"

namespace ps::server {
namespace {

using ::ps::server::testing::MessageText;
using ::ps::server::testing::TextMessage;

constexpr char kEcho[] = "/test.Streams/Echo";
constexpr char kHold[] = "/test.Streams/Hold";

class BlockingStreamServiceTest : public ::testing::Test {
 protected:
  void Start(int max_threads,
             absl::Duration idle_timeout = absl::InfiniteDuration()) {
    service_ =
        std::make_unique<BlockingStreamService>(max_threads, idle_timeout);
    // Sends back each message, then "end".
    service_->Handle(kEcho, [](ByteStream& stream) {
      grpc::ByteBuffer message;
      while (stream.Read(&message)) {
        if (!stream.Write(message)) return grpc::Status::CANCELLED;
      }
      stream.Write(TextMessage("end"));
      return grpc::Status::OK;
    });
    // Holds its thread until released or cancelled.
    service_->Handle(kHold, [this](ByteStream& stream) {
      {
        absl::MutexLock lock(&mu_);
        ++holding_;
      }
      while (!release_.WaitForNotificationWithTimeout(absl::Milliseconds(5))) {
        if (stream.IsCancelled()) {
          return grpc::Status(grpc::StatusCode::CANCELLED, "saw the cancel");
        }
      }
      return grpc::Status(grpc::StatusCode::ABORTED, "released");
    });
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    service_->AddTo(builder);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    service_->Start();
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_),
                                   grpc::InsecureChannelCredentials());
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
  }

  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (server_ != nullptr) server_->Shutdown();
    if (service_ != nullptr) service_->Shutdown();  // Waits for the handlers.
  }

  // Starts a Hold call on its own thread; returns once the server answered.
  std::thread Hold(grpc::ClientContext* context, grpc::Status* status) {
    return std::thread([this, context, status] {
      ByteStreamCall call(stub_.get(), kHold, context);
      call.WritesDone();
      grpc::ByteBuffer ignored;
      while (call.Read(&ignored)) {
      }
      *status = call.Finish();
    });
  }

  void AwaitHolding(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return holding_ >= n;
    };
    mu_.Await(absl::Condition(&enough));
  }

  absl::Notification release_;
  absl::Mutex mu_;
  int holding_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<BlockingStreamService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST_F(BlockingStreamServiceTest, HandlerReadsAndWritesTheStream) {
  Start(0);
  grpc::ClientContext context;
  ByteStreamCall call(stub_.get(), kEcho, &context);
  std::vector<std::string> got;
  for (const char* text : {"a", "bc"}) {
    ASSERT_TRUE(call.Write(TextMessage(text)));
    grpc::ByteBuffer reply;
    ASSERT_TRUE(call.Read(&reply));
    got.push_back(MessageText(reply));
  }
  ASSERT_TRUE(call.WritesDone());
  grpc::ByteBuffer last;
  ASSERT_TRUE(call.Read(&last));
  got.push_back(MessageText(last));
  EXPECT_FALSE(call.Read(&last));
  EXPECT_TRUE(call.Finish().ok());
  EXPECT_EQ(got, (std::vector<std::string>{"a", "bc", "end"}));
}

TEST_F(BlockingStreamServiceTest, OtherMethodsAreUnimplemented) {
  Start(0);
  grpc::ClientContext context;
  ByteStreamCall call(stub_.get(), "/test.Streams/Missing", &context);
  call.WriteLast(TextMessage("x"));
  grpc::ByteBuffer reply;
  EXPECT_FALSE(call.Read(&reply));
  EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(BlockingStreamServiceTest, HandlerSeesTheClientCancel) {
  Start(0);
  grpc::ClientContext context;
  grpc::Status status;
  std::thread hold = Hold(&context, &status);
  AwaitHolding(1);
  context.TryCancel();
  hold.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  // The handler saw it too and gave its thread back: Shutdown (in TearDown)
  // would wait for ever otherwise.
}

TEST_F(BlockingStreamServiceTest, AnIdlePeersCallIsCancelled) {
  Start(0, absl::Milliseconds(100));
  grpc::ClientContext context;
  ByteStreamCall call(stub_.get(), kEcho, &context);
  // One message answered, then nothing: the server gives up on the call
  // (it would otherwise hold a thread for as long as the peer likes).
  ASSERT_TRUE(call.Write(TextMessage("a")));
  grpc::ByteBuffer answer;
  ASSERT_TRUE(call.Read(&answer));
  EXPECT_EQ(MessageText(answer), "a");
  EXPECT_FALSE(call.Read(&answer));
  EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(BlockingStreamServiceTest, CallsBeyondTheThreadBoundAreRefused) {
  Start(2);
  grpc::ClientContext contexts[2];
  grpc::Status statuses[2];
  std::thread holds[2] = {Hold(&contexts[0], &statuses[0]),
                          Hold(&contexts[1], &statuses[1])};
  AwaitHolding(2);

  grpc::ClientContext refused_context;
  grpc::Status refused;
  Hold(&refused_context, &refused).join();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("2 streaming calls"),
            std::string::npos)
      << refused.error_message();

  release_.Notify();
  for (std::thread& t : holds) t.join();
  for (const grpc::Status& s : statuses) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
  }
  // The threads come back once their handlers returned.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  grpc::Status later;
  do {
    grpc::ClientContext context;
    Hold(&context, &later).join();
  } while (later.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
           absl::Now() < give_up);
  EXPECT_EQ(later.error_code(), grpc::StatusCode::ABORTED)
      << later.error_message();
}

}  // namespace
}  // namespace ps::server
