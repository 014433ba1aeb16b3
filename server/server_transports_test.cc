#include "server/server_transports.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/http_testing.h"
#include "common/tcp_frames.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/coordinator_test_util.h"
#include "server/server_config_testing.h"
#include "server/shard_builder.h"

namespace ps::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ServerTransportsTest : public ::testing::Test {
 protected:
  ServerTransportsTest() : config_(testing::TestServerConfig()) {
    config_.server_index = 2;
    config_.num_servers = 3;
  }

  // The Stats call's report, over gRPC.
  absl::StatusOr<std::string> Stats(int port) {
    auto stub = proto::ParameterServer::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    proto::StatsRequest request;
    proto::StatsResponse response;
    const grpc::Status s = stub->Stats(&context, request, &response);
    if (!s.ok()) return absl::UnavailableError(s.error_message());
    return response.report();
  }

  ServerConfig config_;
  ShardBuilder builder_{config_, nullptr};
  ShardHost host_{builder_.ForDeclarations(), DeclarationLimits()};
};

TEST_F(ServerTransportsTest, ServesTheShardOverGrpcAndTheSameHostSocket) {
  testing::LogCapture log;
  {
    ServerTransports transports(config_, &host_, nullptr);
    EXPECT_TRUE(transports.serves_local());
    ASSERT_TRUE(transports.Listen().ok());
    ASSERT_GT(transports.port(), 0);
    EXPECT_EQ(transports.health_port(), 0);
    absl::StatusOr<std::string> report = Stats(transports.port());
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_THAT(*report, HasSubstr("server 2: no model declared"));
    transports.Shutdown(absl::Now() + absl::Seconds(5));
    EXPECT_FALSE(Stats(transports.port()).ok());
  }
  EXPECT_THAT(log.text(),
              HasSubstr("same-host transport served 0 calls on 0 connections"));
  EXPECT_THAT(log.text(),
              HasSubstr("final report:\nserver 2: no model declared"));
}

TEST_F(ServerTransportsTest, WithoutTheSameHostTransportOnlyGrpc) {
  config_.local_transport = false;
  config_.health_port = 0;
  testing::LogCapture log;
  ServerTransports transports(config_, &host_, nullptr);
  EXPECT_FALSE(transports.serves_local());
  ASSERT_TRUE(transports.Listen().ok());
  EXPECT_GT(transports.health_port(), 0);
  EXPECT_NE(transports.health_port(), transports.port());
  transports.Shutdown(absl::Now() + absl::Seconds(5));
  EXPECT_THAT(log.text(), Not(HasSubstr("same-host transport served")));
}

TEST_F(ServerTransportsTest, ServesFramesOverTcpAtTheGivenPort) {
  absl::StatusOr<TcpFrameListener> probe = ListenTcpFrames("127.0.0.1", 0);
  ASSERT_TRUE(probe.ok()) << probe.status();
  const int free_port = probe->port;
  probe->listener.reset();  // Free again, for the server.
  config_.tcp_data_port = free_port;
  ServerTransports transports(config_, &host_, nullptr);
  EXPECT_EQ(transports.tcp_port(), free_port);
  // Something listens there now.
  EXPECT_TRUE(ConnectTcpFrames("127.0.0.1", free_port, absl::Seconds(30)).ok());
}

TEST_F(ServerTransportsTest, FramesOverTcpByDefault) {
  EXPECT_EQ(config_.tcp_data_port, 0);
  ServerTransports transports(config_, &host_, nullptr);
  ASSERT_GT(transports.tcp_port(), 0);
  EXPECT_TRUE(
      ConnectTcpFrames("127.0.0.1", transports.tcp_port(), absl::Seconds(30))
          .ok());
}

TEST_F(ServerTransportsTest, NoFramesOverTcpWhenToldOrWithTls) {
  config_.tcp_data_port = -1;
  {
    ServerTransports transports(config_, &host_, nullptr);
    EXPECT_TRUE(transports.serves_local());
    EXPECT_EQ(transports.tcp_port(), 0);
  }
  // With TLS tensors do not travel in clear: gRPC only across hosts (the
  // configuration refuses a port with TLS; this holds even so).
  config_.tcp_data_port = 0;
  config_.auth.cert_pem = "a certificate";
  ServerTransports transports(config_, &host_, nullptr);
  EXPECT_TRUE(transports.serves_local());
  EXPECT_EQ(transports.tcp_port(), 0);
}

TEST_F(ServerTransportsTest, ATakenTcpPortLeavesTheSameHostSocket) {
  absl::StatusOr<TcpFrameListener> held = ListenTcpFrames("127.0.0.1", 0);
  ASSERT_TRUE(held.ok()) << held.status();
  config_.tcp_data_port = held->port;
  testing::LogCapture log;
  ServerTransports transports(config_, &host_, nullptr);
  EXPECT_TRUE(transports.serves_local());
  EXPECT_EQ(transports.tcp_port(), 0);
  EXPECT_THAT(log.text(), HasSubstr("no frames over TCP on 127.0.0.1"));
}

TEST_F(ServerTransportsTest, StopListeningRefusesLaterCalls) {
  ServerTransports transports(config_, &host_, nullptr);
  ASSERT_TRUE(transports.Listen().ok());
  ASSERT_TRUE(Stats(transports.port()).ok());
  transports.StopListening();
  EXPECT_FALSE(Stats(transports.port()).ok());
}

TEST_F(ServerTransportsTest, ListenNamesAnAddressItCannotTake) {
  absl::StatusOr<ps::testing::HeldPort> held = ps::testing::HeldPort::Listen();
  ASSERT_TRUE(held.ok()) << held.status();
  config_.address = absl::StrCat("127.0.0.1:", held->port());
  ServerTransports transports(config_, &host_, nullptr);
  const absl::Status s = transports.Listen();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("cannot listen on ", config_.address)));
  EXPECT_EQ(transports.port(), 0);
}

}  // namespace
}  // namespace ps::server
