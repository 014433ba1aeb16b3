#include "client/shard_channel.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <memory>
#include <string>
#include <thread>

#include "common/byte_stream_call.h"
#include "common/tcp_frames.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace ps::client_internal {
namespace {

using ::testing::HasSubstr;

ClientOptions Options() {
  ClientOptions options;
  options.rank = 2;
  options.job_id = "job-7";
  options.retry_timeout = absl::ZeroDuration();  // Gives up at once.
  return options;
}

// Nothing listens on port 1: the gRPC channel is made, never used.
ShardChannel Unused(const ClientOptions& options) {
  return ShardChannel(
      1, "127.0.0.1:1",
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()),
      /*partition_fingerprint=*/0xf00d, options);
}

proto::LocalEndpoint Endpoint(const std::string& name) {
  proto::LocalEndpoint endpoint;
  endpoint.set_socket_name(name);
  endpoint.set_secret("secret");
  return endpoint;
}

TEST(ShardChannelTest, EveryHeaderSaysWhoAsksWhichShard) {
  ShardChannel shard = Unused(Options());
  EXPECT_EQ(shard.index(), 1);
  EXPECT_EQ(shard.address(), "127.0.0.1:1");
  proto::RequestHeader header = shard.Header();
  EXPECT_EQ(header.protocol_version(), proto::PROTOCOL_VERSION_CURRENT);
  EXPECT_EQ(header.partition_fingerprint(), 0xf00du);
  EXPECT_EQ(header.worker_rank(), 2);
  EXPECT_EQ(header.server_index(), 1);
  EXPECT_EQ(header.job_id(), "job-7");
  EXPECT_EQ(header.incarnation(), 0u);
  shard.set_incarnation(31);
  EXPECT_EQ(shard.Header().incarnation(), 31u);
  EXPECT_EQ(shard.incarnation(), 31u);
}

TEST(ShardChannelTest, FailuresNameTheShard) {
  ShardChannel shard = Unused(Options());
  EXPECT_TRUE(shard.Annotate(absl::OkStatus()).ok());
  EXPECT_EQ(shard.Annotate(absl::AbortedError("no")),
            absl::AbortedError("server 1 (127.0.0.1:1): no"));
  EXPECT_EQ(
      shard.CallWithRetry("pull", [] { return absl::NotFoundError("gone"); }),
      absl::NotFoundError("server 1 (127.0.0.1:1): gone"));
  const absl::Status given_up = shard.CallWithRetry(
      "pull", [] { return absl::UnavailableError("down"); });
  EXPECT_EQ(given_up.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(given_up.message()),
              HasSubstr("server 1 (127.0.0.1:1): pull still failing"));
}

TEST(ShardChannelTest, TakesAnAnnouncedEndpointOnlyWithTheLocalTransport) {
  ShardChannel shard = Unused(Options());
  EXPECT_FALSE(shard.HasLocalChannel());
  shard.LearnLocalEndpoint(proto::LocalEndpoint());
  EXPECT_FALSE(shard.HasLocalChannel());
  shard.LearnLocalEndpoint(Endpoint("paramserver-test-a"));
  EXPECT_TRUE(shard.HasLocalChannel());

  ClientOptions off = Options();
  off.local_transport = false;
  ShardChannel grpc_only = Unused(off);
  grpc_only.LearnLocalEndpoint(Endpoint("paramserver-test-a"));
  EXPECT_FALSE(grpc_only.HasLocalChannel());
}

TEST(ShardChannelTest, AnUnreachableEndpointFallsBackToGrpcAndIsNotRetried) {
  ShardChannel shard = Unused(Options());
  shard.LearnLocalEndpoint(Endpoint("paramserver-nobody-listens-here"));
  ASSERT_TRUE(shard.HasLocalChannel());
  // The same-host call cannot start: the stream is gRPC's.
  EXPECT_NE(shard.OpenStream("Pull"), nullptr);
  EXPECT_FALSE(shard.HasLocalChannel());
  // Announced again, the same endpoint is not tried again; another one is.
  shard.LearnLocalEndpoint(Endpoint("paramserver-nobody-listens-here"));
  EXPECT_FALSE(shard.HasLocalChannel());
  shard.LearnLocalEndpoint(Endpoint("paramserver-nobody-listens-there"));
  EXPECT_TRUE(shard.HasLocalChannel());
}

// A shard of another host as a worker sees it: its Unix socket is not here
// (no such name), its TCP port is at the host of its gRPC address.
proto::LocalEndpoint ElsewhereEndpoint(int tcp_port) {
  proto::LocalEndpoint endpoint = Endpoint("paramserver-on-another-host");
  endpoint.set_tcp_port(tcp_port);
  return endpoint;
}

TEST(ShardChannelTest, AShardElsewhereIsReachedOverItsTcpPort) {
  absl::StatusOr<TcpFrameListener> listening = ListenTcpFrames("127.0.0.1", 0);
  ASSERT_TRUE(listening.ok()) << listening.status();
  // Welcomes one connection that presents the secret.
  std::thread shard_side([&] {
    absl::StatusOr<std::unique_ptr<LocalSocket>> socket =
        listening->listener->Accept();
    ASSERT_TRUE(socket.ok()) << socket.status();
    Frame hello;
    ASSERT_TRUE((*socket)->ReadFrame(1024, &hello).ok());
    EXPECT_EQ(hello.type, FrameType::kHello);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(hello.payload.begin()),
                          hello.payload.size()),
              "secret");
    (*socket)->Queue(FrameType::kWelcome, "");
    EXPECT_TRUE((*socket)->Flush().ok());
    Frame call;
    EXPECT_TRUE((*socket)->ReadFrame(1024, &call).ok());
    EXPECT_EQ(call.type, FrameType::kCall);
  });
  ShardChannel shard = Unused(Options());
  shard.LearnLocalEndpoint(ElsewhereEndpoint(listening->port));
  std::unique_ptr<ClientStream> stream = shard.OpenStream("Pull");
  EXPECT_NE(dynamic_cast<LocalCall*>(stream.get()), nullptr);
  EXPECT_TRUE(shard.UsesTcpFrames());
  stream->WritesDone();  // Sends the call's frames.
  shard_side.join();
}

TEST(ShardChannelTest, AnUnreachableTcpPortFallsBackToGrpc) {
  int port = 0;
  {
    absl::StatusOr<TcpFrameListener> gone = ListenTcpFrames("127.0.0.1", 0);
    ASSERT_TRUE(gone.ok()) << gone.status();
    port = gone->port;
  }  // Nothing listens there now.
  ShardChannel shard = Unused(Options());
  shard.LearnLocalEndpoint(ElsewhereEndpoint(port));
  ASSERT_TRUE(shard.HasLocalChannel());
  std::unique_ptr<ClientStream> stream = shard.OpenStream("Pull");
  EXPECT_NE(stream, nullptr);
  EXPECT_EQ(dynamic_cast<LocalCall*>(stream.get()), nullptr);
  EXPECT_FALSE(shard.HasLocalChannel());
  EXPECT_FALSE(shard.UsesTcpFrames());
}

// Short, so that the tests below do not wait the real bounds.
constexpr FrameTimeouts kShortTimeouts = {absl::Milliseconds(200),
                                          absl::Milliseconds(200)};

// As Unused, with kShortTimeouts.
ShardChannel WithShortTimeouts() {
  return ShardChannel(
      1, "127.0.0.1:1",
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()),
      /*partition_fingerprint=*/0xf00d, Options(), kShortTimeouts);
}

bool IsFrames(const std::unique_ptr<ClientStream>& stream) {
  return dynamic_cast<LocalCall*>(stream.get()) != nullptr;
}
bool IsGrpc(const std::unique_ptr<ClientStream>& stream) {
  return dynamic_cast<ByteStreamCall*>(stream.get()) != nullptr;
}

// A TCP port whose listener takes no more connections: its accept queue
// (backlog 0) holds one connection never accepted, and the kernel drops
// the SYNs of any other, as a firewall that drops packets does.
struct DroppingPort {
  UniqueFd listener;
  UniqueFd queued;
  int port = 0;
};

DroppingPort ListenAndDrop() {
  DroppingPort out;
  out.listener = UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_GE(out.listener.get(), 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof(address);
  EXPECT_EQ(
      bind(out.listener.get(), reinterpret_cast<sockaddr*>(&address), size), 0);
  EXPECT_EQ(listen(out.listener.get(), 0), 0);
  EXPECT_EQ(getsockname(out.listener.get(),
                        reinterpret_cast<sockaddr*>(&address), &size),
            0);
  out.port = ntohs(address.sin_port);
  out.queued = UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(
      connect(out.queued.get(), reinterpret_cast<sockaddr*>(&address), size),
      0);
  return out;
}

TEST(ShardChannelTest, APortThatDropsPacketsCostsTheConnectTimeoutThenGrpc) {
  DroppingPort dropping = ListenAndDrop();
  ShardChannel shard = WithShortTimeouts();
  shard.LearnLocalEndpoint(ElsewhereEndpoint(dropping.port));
  ASSERT_TRUE(shard.HasLocalChannel());
  // Connecting times out (not refused: no answer at all); gRPC then.
  EXPECT_TRUE(IsGrpc(shard.OpenStream("Pull")));
  EXPECT_FALSE(shard.HasLocalChannel());
  EXPECT_TRUE(IsGrpc(shard.OpenStream("Pull"))) << "tried again";
}

TEST(ShardChannelTest, AShardThatNeverWelcomesCostsTheHandshakeTimeout) {
  // Connections complete in the kernel, but no one reads the hello.
  absl::StatusOr<TcpFrameListener> silent = ListenTcpFrames("127.0.0.1", 0);
  ASSERT_TRUE(silent.ok()) << silent.status();
  ShardChannel shard = WithShortTimeouts();
  shard.LearnLocalEndpoint(ElsewhereEndpoint(silent->port));
  EXPECT_TRUE(IsGrpc(shard.OpenStream("Pull")));
  EXPECT_FALSE(shard.HasLocalChannel());
}

// Welcomes the next connection to `listener` that presents the secret.
void WelcomeOne(LocalListener& listener) {
  absl::StatusOr<std::unique_ptr<LocalSocket>> socket = listener.Accept();
  ASSERT_TRUE(socket.ok()) << socket.status();
  Frame hello;
  ASSERT_TRUE((*socket)->ReadFrame(1024, &hello).ok());
  ASSERT_EQ(hello.type, FrameType::kHello);
  (*socket)->Queue(FrameType::kWelcome, "");
  ASSERT_TRUE((*socket)->Flush().ok());
}

// Opens a call on `shard` while its TCP port at `port` welcomes it: the
// route works. The port is free again afterwards (nothing listens).
void WorkingCall(ShardChannel& shard, int port) {
  absl::StatusOr<TcpFrameListener> listening =
      ListenTcpFrames("127.0.0.1", port);
  ASSERT_TRUE(listening.ok()) << listening.status();
  std::thread shard_side([&] { WelcomeOne(*listening->listener); });
  std::unique_ptr<ClientStream> stream = shard.OpenStream("Pull");
  shard_side.join();
  EXPECT_TRUE(IsFrames(stream));
  // Unfinished, the call closes its connection: none is kept.
}

TEST(ShardChannelTest, ARouteThatWorkedIsKeptThroughOneFailedReconnect) {
  int port = 0;
  {
    absl::StatusOr<TcpFrameListener> probe = ListenTcpFrames("127.0.0.1", 0);
    ASSERT_TRUE(probe.ok()) << probe.status();
    port = probe->port;
  }
  ShardChannel shard = WithShortTimeouts();
  shard.LearnLocalEndpoint(ElsewhereEndpoint(port));
  ASSERT_NO_FATAL_FAILURE(WorkingCall(shard, port));
  // Nothing listens now: the call fails UNAVAILABLE, for the caller to
  // retry, and frames stay the route.
  std::unique_ptr<ClientStream> failed = shard.OpenStream("Pull");
  EXPECT_FALSE(IsFrames(failed));
  EXPECT_FALSE(IsGrpc(failed));
  EXPECT_FALSE(failed->WritesDone());
  EXPECT_EQ(failed->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(shard.HasLocalChannel());
  EXPECT_TRUE(shard.UsesTcpFrames());
  // Back: the retry goes over frames, and the one failure is forgiven.
  ASSERT_NO_FATAL_FAILURE(WorkingCall(shard, port));
  EXPECT_EQ(shard.OpenStream("Pull")->Finish().error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(shard.HasLocalChannel());
  // Two failures in a row: gRPC from now on.
  EXPECT_TRUE(IsGrpc(shard.OpenStream("Pull")));
  EXPECT_FALSE(shard.HasLocalChannel());
}

TEST(ShardChannelTest, AClientSpeakingTlsNeverSendsFramesOverTcp) {
  absl::StatusOr<TcpFrameListener> listening = ListenTcpFrames("127.0.0.1", 0);
  ASSERT_TRUE(listening.ok()) << listening.status();
  ClientOptions tls = Options();
  tls.tls_ca_file = "/the/ca.pem";
  ShardChannel shard = Unused(tls);
  shard.LearnLocalEndpoint(ElsewhereEndpoint(listening->port));
  // Only the Unix socket is tried (not there): gRPC, which speaks TLS.
  std::unique_ptr<ClientStream> stream = shard.OpenStream("Pull");
  EXPECT_EQ(dynamic_cast<LocalCall*>(stream.get()), nullptr);
  EXPECT_FALSE(shard.UsesTcpFrames());
}

}  // namespace
}  // namespace ps::client_internal
