#include "server/local_stream_server.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/local_channel.h"
#include "common/local_socket.h"
#include "common/raw_local_connection.h"
#include "gtest/gtest.h"
#include "server/byte_stream.h"
#include "server/byte_stream_testing.h"

namespace ps::server {
namespace {

using ::ps::server::testing::MessageText;
using ::ps::server::testing::TextMessage;

using ::ps::client_internal::LocalCall;
using ::ps::client_internal::LocalChannel;

constexpr char kEcho[] = "/test.Streams/Echo";
constexpr char kHold[] = "/test.Streams/Hold";
constexpr char kRefuse[] = "/test.Streams/Refuse";

class LocalStreamServerTest : public ::testing::Test {
 protected:
  void Start(LocalStreamServerOptions options = {}) {
    // Sends back each message, then "end".
    methods_.Add(kEcho, [](ByteStream& stream) {
      grpc::ByteBuffer message;
      while (stream.Read(&message)) {
        if (!stream.Write(message)) return grpc::Status::CANCELLED;
      }
      stream.Write(TextMessage("end"));
      return grpc::Status::OK;
    });
    // Holds its thread until released or cancelled.
    methods_.Add(kHold, [this](ByteStream& stream) {
      {
        absl::MutexLock lock(&mu_);
        ++holding_;
      }
      while (!release_.WaitForNotificationWithTimeout(absl::Milliseconds(5))) {
        if (stream.IsCancelled()) {
          absl::MutexLock lock(&mu_);
          ++saw_cancel_;
          return grpc::Status(grpc::StatusCode::CANCELLED, "saw the cancel");
        }
      }
      return grpc::Status(grpc::StatusCode::ABORTED, "released");
    });
    // Reads one message and refuses the call, whatever else comes.
    methods_.Add(kRefuse, [](ByteStream& stream) {
      grpc::ByteBuffer message;
      stream.Read(&message);
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "refused: " + MessageText(message));
    });
    absl::StatusOr<std::unique_ptr<LocalStreamServer>> server =
        LocalStreamServer::Start(&methods_, options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = Channel(server_->secret());
  }

  std::shared_ptr<LocalChannel> Channel(const std::string& secret) {
    return std::make_shared<LocalChannel>(server_->socket_name(), secret,
                                          64 << 20);
  }

  std::unique_ptr<LocalCall> Call(const char* method) {
    absl::StatusOr<std::unique_ptr<LocalCall>> call =
        channel_->StartCall(method);
    EXPECT_TRUE(call.ok()) << call.status();
    return call.ok() ? *std::move(call) : nullptr;
  }

  // Starts a Hold call on its own thread; returns once it ended.
  std::thread Hold(grpc::Status* status) {
    return std::thread([this, status] {
      std::unique_ptr<LocalCall> call = Call(kHold);
      if (call == nullptr) return;
      call->WritesDone();
      *status = call->Finish();
    });
  }

  void AwaitHolding(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return holding_ >= n;
    };
    mu_.Await(absl::Condition(&enough));
  }

  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (server_ != nullptr) server_->Shutdown();
  }

  absl::Notification release_;
  absl::Mutex mu_;
  int holding_ ABSL_GUARDED_BY(mu_) = 0;
  int saw_cancel_ ABSL_GUARDED_BY(mu_) = 0;
  StreamMethods methods_;
  std::unique_ptr<LocalStreamServer> server_;
  std::shared_ptr<LocalChannel> channel_;
};

TEST_F(LocalStreamServerTest, CallsOneAfterTheOtherShareOneConnection) {
  LocalStreamServerOptions options;
  // A second connection would be refused: the calls must reuse the first.
  options.max_connections = 1;
  Start(options);
  const std::string big(5 << 20, 'b');
  for (int round = 0; round < 3; ++round) {
    std::unique_ptr<LocalCall> call = Call(kEcho);
    ASSERT_NE(call, nullptr);
    std::vector<std::string> got;
    for (const std::string& text : {std::string("a"), big}) {
      ASSERT_TRUE(call->Write(TextMessage(text)));
      grpc::ByteBuffer reply;
      ASSERT_TRUE(call->Read(&reply));  // Flushes what was queued.
      got.push_back(MessageText(reply));
    }
    ASSERT_TRUE(call->WritesDone());
    grpc::ByteBuffer last;
    ASSERT_TRUE(call->Read(&last));
    got.push_back(MessageText(last));
    EXPECT_FALSE(call->Read(&last));
    const grpc::Status status = call->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(got, (std::vector<std::string>{"a", big, "end"}));
  }
}

TEST_F(LocalStreamServerTest, OtherMethodsAreUnimplemented) {
  LocalStreamServerOptions options;
  options.max_connections = 1;
  Start(options);
  std::unique_ptr<LocalCall> call = Call("/test.Streams/Missing");
  ASSERT_NE(call, nullptr);
  call->WriteLast(TextMessage("x"));
  EXPECT_EQ(call->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
  // The connection carries the next call.
  call = Call(kEcho);
  ASSERT_NE(call, nullptr);
  call->WritesDone();
  EXPECT_TRUE(call->Finish().ok());
}

TEST_F(LocalStreamServerTest, AnEarlyAnswerDropsTheRestOfTheCall) {
  LocalStreamServerOptions options;
  options.max_connections = 1;
  Start(options);
  std::unique_ptr<LocalCall> call = Call(kRefuse);
  ASSERT_NE(call, nullptr);
  ASSERT_TRUE(call->Write(TextMessage("first")));
  // More than the socket holds: written while the server drains them.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(call->Write(TextMessage(std::string(1 << 20, 'm'))));
  }
  const grpc::Status status = call->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "refused: first");
  call = Call(kEcho);
  ASSERT_NE(call, nullptr);
  ASSERT_TRUE(call->WriteLast(TextMessage("next")));
  grpc::ByteBuffer reply;
  ASSERT_TRUE(call->Read(&reply));
  EXPECT_EQ(MessageText(reply), "next");
  EXPECT_TRUE(call->Finish().ok());
}

TEST_F(LocalStreamServerTest, AConnectionWithoutTheSecretIsRefused) {
  Start();
  absl::StatusOr<std::unique_ptr<LocalCall>> call =
      Channel("not the secret")->StartCall(kEcho);
  EXPECT_EQ(call.status().code(), absl::StatusCode::kUnauthenticated)
      << call.status();
}

// A channel as a worker on another host has it: the Unix socket is not
// there (no such name), the TCP port is.
std::shared_ptr<LocalChannel> TcpChannel(const LocalStreamServer& server,
                                         const std::string& secret) {
  return std::make_shared<LocalChannel>("paramserver-not-on-this-host", secret,
                                        64 << 20, "127.0.0.1",
                                        server.tcp_port());
}

LocalStreamServerOptions WithTcp() {
  LocalStreamServerOptions options;
  options.tcp_host = "127.0.0.1";
  return options;
}

TEST_F(LocalStreamServerTest, WhereTheUnixSocketIsNotCallsGoOverTcp) {
  Start(WithTcp());
  ASSERT_GT(server_->tcp_port(), 0);
  std::shared_ptr<LocalChannel> channel =
      TcpChannel(*server_, server_->secret());
  const std::string big(5 << 20, 'b');
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<std::unique_ptr<LocalCall>> call = channel->StartCall(kEcho);
    ASSERT_TRUE(call.ok()) << call.status();
    EXPECT_TRUE(channel->uses_tcp());
    ASSERT_TRUE((*call)->Write(TextMessage(big)));
    ASSERT_TRUE((*call)->WritesDone());
    grpc::ByteBuffer reply;
    ASSERT_TRUE((*call)->Read(&reply));
    EXPECT_EQ(MessageText(reply), big);
    ASSERT_TRUE((*call)->Read(&reply));
    EXPECT_EQ(MessageText(reply), "end");
    EXPECT_TRUE((*call)->Finish().ok());
  }
  // Both calls on one TCP connection; none over the Unix socket.
  EXPECT_EQ(server_->tcp_calls(), 2);
  EXPECT_EQ(server_->tcp_connections(), 1);
  EXPECT_EQ(server_->calls(), 0);
  EXPECT_EQ(server_->connections(), 0);
}

TEST_F(LocalStreamServerTest, WhereTheUnixSocketIsCallsDoNotGoOverTcp) {
  Start(WithTcp());
  channel_ = std::make_shared<LocalChannel>(server_->socket_name(),
                                            server_->secret(), 64 << 20,
                                            "127.0.0.1", server_->tcp_port());
  std::unique_ptr<LocalCall> call = Call(kEcho);
  ASSERT_NE(call, nullptr);
  EXPECT_FALSE(channel_->uses_tcp());
  EXPECT_TRUE(call->Finish().ok());
  EXPECT_EQ(server_->calls(), 1);
  EXPECT_EQ(server_->tcp_calls(), 0);
}

TEST_F(LocalStreamServerTest, ATcpConnectionWithoutTheSecretIsRefused) {
  Start(WithTcp());
  absl::StatusOr<std::unique_ptr<LocalCall>> call =
      TcpChannel(*server_, "not the secret")->StartCall(kEcho);
  EXPECT_EQ(call.status().code(), absl::StatusCode::kUnauthenticated)
      << call.status();
  EXPECT_EQ(server_->tcp_connections(), 0);
}

TEST_F(LocalStreamServerTest, WithoutTcpAChannelFromElsewhereIsUnavailable) {
  Start();  // Unix only.
  EXPECT_EQ(server_->tcp_port(), 0);
  absl::StatusOr<std::unique_ptr<LocalCall>> call =
      TcpChannel(*server_, server_->secret())->StartCall(kEcho);
  // The caller then goes through gRPC (client/shard_channel.h).
  EXPECT_EQ(call.status().code(), absl::StatusCode::kUnavailable)
      << call.status();
}

TEST_F(LocalStreamServerTest, HandlerSeesTheClientGoAway) {
  Start();
  {
    std::unique_ptr<LocalCall> call = Call(kHold);
    ASSERT_NE(call, nullptr);
    call->WritesDone();
    AwaitHolding(1);
  }  // Destroyed unfinished: the connection closes.
  absl::MutexLock lock(&mu_);
  auto saw = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return saw_cancel_ == 1;
  };
  mu_.Await(absl::Condition(&saw));
}

TEST_F(LocalStreamServerTest, AnIdlePeersCallIsCancelled) {
  LocalStreamServerOptions options;
  options.idle_timeout = absl::Milliseconds(100);
  Start(options);
  std::unique_ptr<LocalCall> call = Call(kEcho);
  ASSERT_NE(call, nullptr);
  // One message answered, then nothing: the server gives up on the call.
  ASSERT_TRUE(call->Write(TextMessage("a")));
  grpc::ByteBuffer answer;
  ASSERT_TRUE(call->Read(&answer));
  EXPECT_EQ(MessageText(answer), "a");
  EXPECT_FALSE(call->Read(&answer));
  EXPECT_EQ(call->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(LocalStreamServerTest,
       AConnectionWithoutTheSecretIsClosedAtTheHelloTimeout) {
  LocalStreamServerOptions options;
  options.hello_timeout = absl::Milliseconds(100);
  options.idle_timeout = absl::Hours(1);
  options.max_connections = 1;
  Start(options);
  absl::StatusOr<std::unique_ptr<LocalSocket>> silent =
      LocalSocket::Connect(server_->socket_name());
  ASSERT_TRUE(silent.ok()) << silent.status();
  // The server closes it (after the refusal), though its idle limit is an
  // hour.
  Frame frame;
  absl::Status read = absl::OkStatus();
  while (read.ok()) read = (*silent)->ReadFrame(1 << 10, &frame);
  EXPECT_EQ(read.code(), absl::StatusCode::kUnavailable) << read;
  // Its place is free again for a real client.
  std::unique_ptr<LocalCall> call = Call(kEcho);
  ASSERT_NE(call, nullptr);
}

TEST_F(LocalStreamServerTest, ConnectionsBeyondTheBoundAreRefused) {
  LocalStreamServerOptions options;
  options.max_connections = 2;
  Start(options);
  grpc::Status statuses[2];
  std::thread holds[2] = {Hold(&statuses[0]), Hold(&statuses[1])};
  AwaitHolding(2);

  absl::StatusOr<std::unique_ptr<LocalCall>> refused =
      Channel(server_->secret())->StartCall(kHold);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_NE(refused.status().message().find("2 local connections"),
            absl::string_view::npos)
      << refused.status();

  release_.Notify();
  for (std::thread& t : holds) t.join();
  for (const grpc::Status& s : statuses) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
  }
}

TEST_F(LocalStreamServerTest, AMessageAboveTheLimitBreaksTheConnection) {
  LocalStreamServerOptions options;
  options.max_message_bytes = 1000;
  Start(options);
  std::unique_ptr<LocalCall> call = Call(kEcho);
  ASSERT_NE(call, nullptr);
  call->WriteLast(TextMessage(std::string(1001, 'x')));
  EXPECT_EQ(call->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(LocalStreamServerTest, HalfSentMessagesHoldAtMostTheReceivingBound) {
  LocalStreamServerOptions options;
  options.max_message_bytes = 1000;
  options.max_receiving_bytes = 1500;
  Start(options);
  // A frame of 1000 bytes stops after 400: its 1000 bytes are held.
  ::ps::testing::RawLocalConnection half(server_->socket_name());
  ASSERT_TRUE(half.ok());
  ASSERT_TRUE(half.Hello(server_->secret()));
  ASSERT_TRUE(half.SendFrame(FrameType::kCall, kEcho));
  ASSERT_TRUE(half.SendHeader(FrameType::kMessage, 1000));
  ASSERT_TRUE(half.SendZeros(400));
  while (server_->receiving_bytes() != 1000)
    absl::SleepFor(absl::Milliseconds(1));
  // Another 1000 bytes would pass the bound: that connection breaks.
  {
    std::unique_ptr<LocalCall> call = Call(kEcho);
    ASSERT_NE(call, nullptr);
    call->WriteLast(TextMessage(std::string(1000, 'x')));
    EXPECT_EQ(call->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  // Smaller messages still fit.
  {
    std::unique_ptr<LocalCall> call =
        Channel(server_->secret())->StartCall(kEcho).value();
    ASSERT_TRUE(call->Write(TextMessage("a")));
    grpc::ByteBuffer answer;
    ASSERT_TRUE(call->Read(&answer));
    EXPECT_EQ(MessageText(answer), "a");
  }
  // Once the half-sent frame's connection is gone, its bytes are free.
  half.Close();
  while (server_->receiving_bytes() != 0) absl::SleepFor(absl::Milliseconds(1));
  std::unique_ptr<LocalCall> call =
      Channel(server_->secret())->StartCall(kEcho).value();
  ASSERT_TRUE(call->Write(TextMessage(std::string(1000, 'y'))));
  grpc::ByteBuffer answer;
  ASSERT_TRUE(call->Read(&answer));
  EXPECT_EQ(MessageText(answer), std::string(1000, 'y'));
}

TEST_F(LocalStreamServerTest, ShutdownCancelsCallsLeftAtItsDeadline) {
  Start();
  grpc::Status status;
  std::thread hold = Hold(&status);
  AwaitHolding(1);
  server_->Shutdown(absl::Now() + absl::Milliseconds(50));
  hold.join();
  EXPECT_FALSE(status.ok());
  {
    absl::MutexLock lock(&mu_);
    EXPECT_EQ(saw_cancel_, 1);
  }
  // Nothing listens any more.
  EXPECT_EQ(Channel(server_->secret())->StartCall(kEcho).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ps::server
