#include "common/local_socket.h"

#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_testing.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::string Text(const grpc::Slice& slice) {
  return std::string(reinterpret_cast<const char*>(slice.begin()),
                     slice.size());
}

// A message of `parts` slices holding `text` in turn.
grpc::ByteBuffer Message(const std::vector<std::string>& parts) {
  std::vector<grpc::Slice> slices;
  for (const std::string& part : parts) slices.emplace_back(part);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// Both ends of a connected pair.
std::pair<std::unique_ptr<LocalSocket>, std::unique_ptr<LocalSocket>> Pair() {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return {std::make_unique<LocalSocket>(fds[0]),
          std::make_unique<LocalSocket>(fds[1])};
}

TEST(LocalSocketTest, FramesArriveWholeAndInOrder) {
  auto [a, b] = Pair();
  const std::string big(3 << 20, 'x');  // Read straight into its slice.
  a->Queue(FrameType::kCall, "/ps.proto.ParameterServer/Pull");
  ASSERT_OK(a->QueueMessage(Message({"ab", "", "cde"})));
  a->Queue(FrameType::kHalfClose, "");
  // The big message does not fit the socket's buffer: sent by a thread
  // while this one reads.
  std::thread writer([&, &a = a] {
    EXPECT_OK(a->Flush());
    EXPECT_OK(a->QueueMessage(Message({big, "!"})));
    EXPECT_OK(a->Flush());
  });
  Frame frame;
  ASSERT_OK(b->ReadFrame(16 << 20, &frame));
  EXPECT_EQ(frame.type, FrameType::kCall);
  EXPECT_EQ(Text(frame.payload), "/ps.proto.ParameterServer/Pull");
  ASSERT_OK(b->ReadFrame(16 << 20, &frame));
  EXPECT_EQ(frame.type, FrameType::kMessage);
  EXPECT_EQ(Text(frame.payload), "abcde");
  ASSERT_OK(b->ReadFrame(16 << 20, &frame));
  EXPECT_EQ(frame.type, FrameType::kHalfClose);
  EXPECT_EQ(frame.payload.size(), 0u);
  ASSERT_OK(b->ReadFrame(16 << 20, &frame));
  EXPECT_EQ(frame.type, FrameType::kMessage);
  EXPECT_EQ(Text(frame.payload), big + "!");
  writer.join();
}

TEST(LocalSocketTest, QueuedFramesLeaveOnceMoreThanTheFlushSizeWait) {
  auto [a, b] = Pair();
  ASSERT_OK(a->QueueMessage(Message({"small"})));
  EXPECT_FALSE(b->HasInputOrHangup());  // Still queued.
  std::thread writer([&, &a = a] {
    // Past kFlushBytes: sent without a Flush.
    EXPECT_OK(
        a->QueueMessage(Message({std::string(LocalSocket::kFlushBytes, 'y')})));
  });
  Frame frame;
  ASSERT_OK(b->ReadFrame(1 << 20, &frame));
  EXPECT_EQ(Text(frame.payload), "small");
  ASSERT_OK(b->ReadFrame(1 << 20, &frame));
  EXPECT_EQ(frame.payload.size(), LocalSocket::kFlushBytes);
  writer.join();
}

TEST(LocalSocketTest, AFrameAboveTheLimitIsRefused) {
  auto [a, b] = Pair();
  ASSERT_OK(a->QueueMessage(Message({std::string(1001, 'z')})));
  ASSERT_OK(a->Flush());
  Frame frame;
  const absl::Status status = b->ReadFrame(1000, &frame);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("1001 bytes exceeds the limit of 1000"),
            absl::string_view::npos)
      << status;
}

TEST(LocalSocketTest, AMalformedHeaderIsRefused) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  LocalSocket reader(fds[1]);
  // Type 9 does not exist.
  const unsigned char header[8] = {0, 0, 0, 0, 9, 0, 0, 0};
  ASSERT_EQ(write(fds[0], header, sizeof(header)), 8);
  Frame frame;
  EXPECT_EQ(reader.ReadFrame(100, &frame).code(), absl::StatusCode::kDataLoss);
  close(fds[0]);
}

TEST(LocalSocketTest, TheShutdownOrCloseOfThePeerIsUnavailable) {
  auto [a, b] = Pair();
  EXPECT_FALSE(b->HasInputOrHangup());
  a.reset();
  EXPECT_TRUE(b->HasInputOrHangup());
  Frame frame;
  EXPECT_EQ(b->ReadFrame(100, &frame).code(), absl::StatusCode::kUnavailable);
  b->Queue(FrameType::kMessage, "x");
  EXPECT_EQ(b->Flush().code(), absl::StatusCode::kUnavailable);
}

TEST(LocalSocketTest, AReadWaitsNoLongerThanTheIdleTimeout) {
  auto [a, b] = Pair();
  ASSERT_OK(b->SetIdleTimeout(absl::Milliseconds(20)));
  Frame frame;
  const absl::Status status = b->ReadFrame(100, &frame);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
}

TEST(LocalSocketTest, ShutdownWakesABlockedRead) {
  auto [a, b] = Pair();
  std::thread reader([&, &b = b] {
    Frame frame;
    EXPECT_FALSE(b->ReadFrame(100, &frame).ok());
  });
  b->Shutdown();
  reader.join();
}

TEST(LocalSocketTest, StatusPayloadsRoundTrip) {
  const std::string payload = EncodeStatusPayload(
      grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many"));
  absl::StatusOr<grpc::Status> status =
      DecodeStatusPayload(grpc::Slice(payload));
  ASSERT_OK(status.status());
  EXPECT_EQ(status->error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status->error_message(), "too many");

  EXPECT_EQ(
      DecodeStatusPayload(grpc::Slice(std::string("abc"))).status().code(),
      absl::StatusCode::kDataLoss);
  const std::string unknown_code("\x11\x00\x00\x00", 4);  // 17
  EXPECT_EQ(DecodeStatusPayload(grpc::Slice(unknown_code)).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(LocalListenerTest, ConnectsAcceptsAndKnowsThePeersUser) {
  absl::StatusOr<std::string> name = NewLocalSocketName();
  ASSERT_OK(name.status());
  absl::StatusOr<std::unique_ptr<LocalListener>> listener =
      LocalListener::Listen(*name);
  ASSERT_OK(listener.status());
  // The name is taken now.
  EXPECT_EQ(LocalListener::Listen(*name).status().code(),
            absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<std::unique_ptr<LocalSocket>> client =
      LocalSocket::Connect(*name);
  ASSERT_OK(client.status());
  absl::StatusOr<std::unique_ptr<LocalSocket>> server = (*listener)->Accept();
  ASSERT_OK(server.status());
  absl::StatusOr<uid_t> uid = (*server)->PeerUid();
  ASSERT_OK(uid.status());
  EXPECT_EQ(*uid, geteuid());

  (*client)->Queue(FrameType::kHello, "secret");
  ASSERT_OK((*client)->Flush());
  Frame frame;
  ASSERT_OK((*server)->ReadFrame(100, &frame));
  EXPECT_EQ(frame.type, FrameType::kHello);
  EXPECT_EQ(Text(frame.payload), "secret");

  std::thread accept([&] {
    EXPECT_EQ((*listener)->Accept().status().code(),
              absl::StatusCode::kCancelled);
  });
  (*listener)->Shutdown();
  accept.join();
}

TEST(LocalListenerTest, ConnectingToANameNobodyListensOnIsUnavailable) {
  absl::StatusOr<std::string> name = NewLocalSocketName();
  ASSERT_OK(name.status());
  EXPECT_EQ(LocalSocket::Connect(*name).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(LocalListenerTest, SecretsAndNamesDiffer) {
  absl::StatusOr<std::string> a = NewLocalSecret();
  absl::StatusOr<std::string> b = NewLocalSecret();
  ASSERT_OK(a.status());
  ASSERT_OK(b.status());
  EXPECT_EQ(a->size(), 32u);
  EXPECT_NE(*a, *b);
}

}  // namespace
}  // namespace ps
