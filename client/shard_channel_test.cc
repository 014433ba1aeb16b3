#include "client/shard_channel.h"

#include <memory>
#include <string>
#include <thread>

#include "common/tcp_frames.h"
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
