// The public header compiles on its own, against //client:client alone, and
// brings no gRPC or protobuf header with it (a training program that
// includes it needs neither). Also what the library checks locally, before
// any server is involved.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/parameter_client.h"  // First: must be self-contained.
#include "client/rpc_header_macros.h"
#include "gtest/gtest.h"

static_assert(!PS_SAW_PROTOBUF_HEADER,
              "client/parameter_client.h includes a protobuf header");
static_assert(!PS_SAW_GRPC_HEADER,
              "client/parameter_client.h includes a gRPC header");

namespace ps {
namespace {

// Sets the launcher's variables for one test and unsets them after.
class LauncherEnvironment {
 public:
  LauncherEnvironment() {
    Set("PS_RANK", "1");
    Set("PS_NUM_WORKERS", "2");
    Set("PS_LOCAL_RANK", "1");
    Set("PS_LOCAL_NUM_WORKERS", "2");
    Set("PS_NUM_SERVERS", "2");
    Set("PS_SERVERS", "127.0.0.1:7000,ps-1.example:7001");
    Set("PS_JOB_ID", "job-7");
  }
  ~LauncherEnvironment() {
    for (const char* name :
         {"PS_RANK", "PS_NUM_WORKERS", "PS_LOCAL_RANK", "PS_LOCAL_NUM_WORKERS",
          "PS_NUM_SERVERS", "PS_SERVERS", "PS_JOB_ID"}) {
      unsetenv(name);
    }
  }
  void Set(const char* name, const char* value) { setenv(name, value, 1); }
};

TEST(PublicHeaderTest, FromEnvironmentReadsTheLaunchersVariables) {
  LauncherEnvironment environment;
  absl::StatusOr<ClientOptions> options = ClientOptions::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->servers,
            (std::vector<std::string>{"127.0.0.1:7000", "ps-1.example:7001"}));
  EXPECT_EQ(options->rank, 1);
  EXPECT_EQ(options->job_id, "job-7");
  EXPECT_EQ(options->chunk_elements, ClientOptions().chunk_elements);
  EXPECT_EQ(options->retry_timeout, ClientOptions().retry_timeout);
}

TEST(PublicHeaderTest, FromEnvironmentNamesAMissingOrBadVariable) {
  LauncherEnvironment environment;
  unsetenv("PS_RANK");
  absl::Status missing = ClientOptions::FromEnvironment().status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.message().find("PS_RANK"), absl::string_view::npos)
      << missing;
  environment.Set("PS_RANK", "2");  // Not below PS_NUM_WORKERS.
  absl::Status out_of_range = ClientOptions::FromEnvironment().status();
  EXPECT_EQ(out_of_range.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out_of_range.message().find("PS_RANK"), absl::string_view::npos)
      << out_of_range;
  environment.Set("PS_RANK", "0");
  environment.Set("PS_SERVERS", "127.0.0.1:7000");
  absl::Status short_list = ClientOptions::FromEnvironment().status();
  EXPECT_EQ(short_list.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_list.message().find("PS_"), absl::string_view::npos)
      << short_list;
}

TEST(PublicHeaderTest, ConnectRefusesBadOptions) {
  ClientOptions none;
  EXPECT_EQ(ParameterClient::Connect(none).status().code(),
            absl::StatusCode::kInvalidArgument);
  ClientOptions bad_address;
  bad_address.servers = {"no port"};
  EXPECT_EQ(ParameterClient::Connect(bad_address).status().code(),
            absl::StatusCode::kInvalidArgument);
  ClientOptions twice;
  twice.servers = {"127.0.0.1:7000", "127.0.0.1:7000"};
  EXPECT_EQ(ParameterClient::Connect(twice).status().code(),
            absl::StatusCode::kInvalidArgument);
  ClientOptions no_chunk;
  no_chunk.servers = {"127.0.0.1:7000"};
  no_chunk.chunk_elements = 0;
  EXPECT_EQ(ParameterClient::Connect(no_chunk).status().code(),
            absl::StatusCode::kInvalidArgument);
  ClientOptions negative_rank;
  negative_rank.servers = {"127.0.0.1:7000"};
  negative_rank.rank = -1;
  EXPECT_EQ(ParameterClient::Connect(negative_rank).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A loopback server that opens each connection with HTTP/2's server
// preface (an empty SETTINGS frame) and says nothing more: enough for a
// client to connect, not for any call to be answered.
class SilentServer {
 public:
  SilentServer() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (listen_fd_ < 0 ||
        bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        listen(listen_fd_, 16) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address),
                    &length) != 0) {
      return;
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~SilentServer() {
    // Ends accept() in Serve.
    if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    if (listen_fd_ >= 0) close(listen_fd_);
    for (int fd : connections_) close(fd);
  }
  int port() const { return port_; }

 private:
  void Serve() {
    static constexpr unsigned char kEmptySettings[9] = {0, 0, 0, 4, 0,
                                                        0, 0, 0, 0};
    while (true) {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      connections_.push_back(fd);
      (void)!write(fd, kEmptySettings, sizeof(kEmptySettings));
    }
  }

  int listen_fd_ = -1;
  int port_ = 0;
  // Written by the thread only, read after joining it.
  std::vector<int> connections_;
  std::thread thread_;
};

TEST(PublicHeaderTest, DeclareRefusesAnInvalidModelLocally) {
  SilentServer server;
  ASSERT_NE(server.port(), 0);
  ClientOptions options;
  options.servers = {"127.0.0.1:" + std::to_string(server.port())};
  options.connect_timeout = absl::Seconds(10);
  // Were anything sent, the silent server would leave Declare waiting for
  // ever: the test's timeout would say so.
  absl::StatusOr<std::unique_ptr<ParameterClient>> client =
      ParameterClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();

  ModelSpec model;
  model.tensors.push_back({"layer.0/w", DType::kFloat32, {4, 0}});
  absl::Status status = (*client)->Declare(model, 10).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("layer.0/w"), absl::string_view::npos)
      << status;
  EXPECT_EQ((*client)->Declare(ModelSpec(), 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  DeclarationLimits limits;
  ModelSpec too_big;
  too_big.tensors.push_back(
      {"huge",
       DType::kFloat32,
       {static_cast<int64_t>(limits.max_model_bytes / 4 + 1)}});
  EXPECT_EQ((*client)->Declare(too_big, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
