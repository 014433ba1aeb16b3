// Drives HealthService through a real GrpcServer on 127.0.0.1, as a
// Kubernetes gRPC probe would.
#include "server/health_service.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "server/grpc_server.h"

namespace ps::server {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

constexpr char kServiceName[] = "test.Served";

// A service with no methods: only its name matters here.
class EmptyService final : public grpc::Service {};

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ =
        *GrpcServer::Start("127.0.0.1:0", &service_, kServiceName, 1 << 20);
    stub_ = Health::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                            grpc::InsecureChannelCredentials()));
  }

  grpc::Status Check(const std::string& service,
                     HealthCheckResponse::ServingStatus* status) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    grpc::Status s = stub_->Check(&context, request, &response);
    *status = response.status();
    return s;
  }

  EmptyService service_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, TheServerAndItsServiceAreServing) {
  for (const std::string& name : {std::string(""), std::string(kServiceName)}) {
    HealthCheckResponse::ServingStatus status = HealthCheckResponse::UNKNOWN;
    ASSERT_TRUE(Check(name, &status).ok()) << name;
    EXPECT_EQ(status, HealthCheckResponse::SERVING) << name;
  }
}

TEST_F(HealthServiceTest, AnUnknownServiceIsNotFound) {
  HealthCheckResponse::ServingStatus status = HealthCheckResponse::UNKNOWN;
  grpc::Status s = Check("test.Other", &status);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("test.Other"), std::string::npos);
}

TEST(HealthServiceShutdownTest, ChecksSayNotServingAfterShutdown) {
  HealthService health({kServiceName});
  grpc::ServerContext context;
  HealthCheckRequest request;
  HealthCheckResponse response;
  health.Shutdown();
  ASSERT_TRUE(health.Check(&context, &request, &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, AWatchSeesServingThenNotServingAndEndsAtShutdown) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  HealthCheckRequest request;
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader =
      stub_->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  // Shutdown waits for the watch, which the health service ends first: a
  // watch that held on would make this hang until the deadline above.
  std::thread stopper([this] { server_->Shutdown(); });
  std::vector<HealthCheckResponse::ServingStatus> rest;
  while (reader->Read(&response)) rest.push_back(response.status());
  EXPECT_EQ(rest, std::vector<HealthCheckResponse::ServingStatus>{
                      HealthCheckResponse::NOT_SERVING});
  EXPECT_TRUE(reader->Finish().ok());
  stopper.join();
}

TEST_F(HealthServiceTest, AWatchEndsWhenItsCallerCancels) {
  grpc::ClientContext context;
  HealthCheckRequest request;
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader =
      stub_->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  context.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The handler has let go: Shutdown (waiting for every handler) returns.
  const absl::Time start = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace ps::server
