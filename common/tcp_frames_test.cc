#include "common/tcp_frames.h"

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/status_testing.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::string Text(const grpc::Slice& slice) {
  return std::string(reinterpret_cast<const char*>(slice.begin()),
                     slice.size());
}

TEST(TcpFramesTest, FramesGoBothWaysOverTcp) {
  absl::StatusOr<TcpFrameListener> listening = ListenTcpFrames("127.0.0.1", 0);
  ASSERT_OK(listening.status());
  ASSERT_GT(listening->port, 0);
  absl::StatusOr<std::unique_ptr<LocalSocket>> client =
      ConnectTcpFrames("127.0.0.1", listening->port, absl::Seconds(30));
  ASSERT_OK(client.status());
  absl::StatusOr<std::unique_ptr<LocalSocket>> server =
      listening->listener->Accept();
  ASSERT_OK(server.status());
  EXPECT_TRUE((*client)->is_tcp());
  EXPECT_TRUE((*server)->is_tcp());
  // The kernel cannot say who a TCP peer is.
  EXPECT_EQ((*server)->PeerUid().status().code(),
            absl::StatusCode::kFailedPrecondition);

  const std::string big(5 << 20, 'b');  // More than the socket buffers.
  std::thread writer([&] {
    (*client)->Queue(FrameType::kHello, "secret");
    (*client)->Queue(FrameType::kMessage, big);
    EXPECT_OK((*client)->Flush());
  });
  Frame frame;
  ASSERT_OK((*server)->ReadFrame(100, &frame));
  EXPECT_EQ(frame.type, FrameType::kHello);
  EXPECT_EQ(Text(frame.payload), "secret");
  ASSERT_OK((*server)->ReadFrame(8 << 20, &frame));
  EXPECT_EQ(frame.type, FrameType::kMessage);
  EXPECT_EQ(Text(frame.payload), big);
  writer.join();

  (*server)->Queue(FrameType::kWelcome, "");
  ASSERT_OK((*server)->Flush());
  ASSERT_OK((*client)->ReadFrame(100, &frame));
  EXPECT_EQ(frame.type, FrameType::kWelcome);

  server->reset();
  EXPECT_EQ((*client)->ReadFrame(100, &frame).code(),
            absl::StatusCode::kUnavailable);
}

TEST(TcpFramesTest, AListenerShutDownStopsAccepting) {
  absl::StatusOr<TcpFrameListener> listening = ListenTcpFrames("", 0);
  ASSERT_OK(listening.status());
  std::thread accept([&] {
    EXPECT_EQ(listening->listener->Accept().status().code(),
              absl::StatusCode::kCancelled);
  });
  listening->listener->Shutdown();
  accept.join();
}

TEST(TcpFramesTest, ATakenPortIsAFailedPrecondition) {
  absl::StatusOr<TcpFrameListener> first = ListenTcpFrames("127.0.0.1", 0);
  ASSERT_OK(first.status());
  EXPECT_EQ(ListenTcpFrames("127.0.0.1", first->port).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(TcpFramesTest, ConnectingWhereNothingListensIsUnavailable) {
  int port = 0;
  {
    absl::StatusOr<TcpFrameListener> gone = ListenTcpFrames("127.0.0.1", 0);
    ASSERT_OK(gone.status());
    port = gone->port;
  }  // Closed: nothing listens there now.
  EXPECT_EQ(
      ConnectTcpFrames("127.0.0.1", port, absl::Seconds(30)).status().code(),
      absl::StatusCode::kUnavailable);
  EXPECT_EQ(ConnectTcpFrames("no-such-host.invalid", port, absl::Seconds(30))
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
}

TEST(TcpFramesTest, HostOfTargetTakesTheHostOfHostPort) {
  EXPECT_EQ(HostOfTarget("10.0.0.2:5000"), "10.0.0.2");
  EXPECT_EQ(HostOfTarget("server-1:5000"), "server-1");
  EXPECT_EQ(HostOfTarget("[::1]:5000"), "::1");
  EXPECT_EQ(HostOfTarget("unix:/tmp/socket"), "");
  EXPECT_EQ(HostOfTarget("dns:///server:5000"), "");
  EXPECT_EQ(HostOfTarget("server"), "");
  EXPECT_EQ(HostOfTarget("[::1]"), "");
}

}  // namespace
}  // namespace ps
