#include "client/connect.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"

namespace ps::client_internal {
namespace {

using ::testing::HasSubstr;

// A gRPC server on 127.0.0.1 that implements nothing: enough to connect.
class Listening {
 public:
  Listening() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~Listening() { server_->Shutdown(); }
  const std::string& address() const { return address_; }

 private:
  proto::ParameterServer::Service service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST(ConnectChannelsTest, ConnectsToEveryServerInOrder) {
  Listening first;
  Listening second;
  ClientOptions options;
  options.servers = {first.address(), second.address()};
  options.connect_timeout = absl::Seconds(30);
  absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> channels =
      ConnectChannels(options);
  ASSERT_TRUE(channels.ok()) << channels.status();
  ASSERT_EQ(channels->size(), 2u);
  for (const std::shared_ptr<grpc::Channel>& channel : *channels) {
    EXPECT_EQ(channel->GetState(/*try_to_connect=*/false), GRPC_CHANNEL_READY);
  }
}

TEST(ConnectChannelsTest, NamesTheServerThatDoesNotAnswer) {
  Listening up;
  ClientOptions options;
  // Port 1 on loopback: nothing listens there.
  options.servers = {up.address(), "127.0.0.1:1"};
  options.connect_timeout = absl::Milliseconds(300);
  const absl::Status status = ConnectChannels(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("parameter server 127.0.0.1:1 did not accept a "
                        "connection within 300ms"));
}

TEST(ConnectChannelsTest, RefusesBadAuthenticationOptionsBeforeConnecting) {
  ClientOptions options;
  options.servers = {"127.0.0.1:1"};
  options.tls_ca_file = "/nonexistent/ca.pem";
  options.connect_timeout = absl::Hours(1);  // Not waited for.
  const absl::Status status = ConnectChannels(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("tls_ca_file"));
}

}  // namespace
}  // namespace ps::client_internal
