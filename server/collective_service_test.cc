#include "server/collective_service.h"

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/blocking_stream_service.h"
#include "server/grpc_server.h"

namespace ps::server {
namespace {

// The service on 127.0.0.1 as shard 0 of job "j" with two ranks, served as
// the shard serves it: a method of a BlockingStreamService beside another
// typed service.
class CollectiveServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CollectiveServiceOptions options;
    options.num_workers = 2;
    options.job_id = "j";
    service_ = std::make_unique<CollectiveService>(options);
    service_->AddTo(streams_);
    GrpcServerOptions server_options;
    server_options.stream_service = &streams_;
    absl::StatusOr<std::unique_ptr<GrpcServer>> server = GrpcServer::Start(
        "127.0.0.1:0", &typed_, proto::ParameterServer::service_full_name(),
        server_options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = proto::Collectives::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                            grpc::InsecureChannelCredentials()));
  }

  proto::CollectiveRequest Request(int rank, float value) {
    proto::CollectiveRequest request;
    request.mutable_header()->set_protocol_version(2);
    request.mutable_header()->set_worker_rank(rank);
    request.mutable_header()->set_job_id("j");
    request.set_kind(proto::CollectiveRequest::ALLREDUCE);
    request.set_op(proto::CollectiveRequest::SUM);
    request.set_name("loss");
    request.set_sequence(1);
    request.set_dtype(proto::DTYPE_FLOAT32);
    request.add_shape(1);
    request.set_num_parts(1);
    request.set_num_elements(1);
    request.set_data(std::string(reinterpret_cast<const char*>(&value), 4));
    return request;
  }

  absl::StatusOr<proto::CollectiveResponse> Call(
      const proto::CollectiveRequest& request) {
    grpc::ClientContext context;
    proto::CollectiveResponse response;
    absl::Status s =
        FromGrpcStatus(stub_->Collective(&context, request, &response));
    if (!s.ok()) return s;
    return response;
  }

  proto::ParameterServer::Service typed_;
  BlockingStreamService streams_{0};
  std::unique_ptr<CollectiveService> service_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<proto::Collectives::Stub> stub_;
};

TEST_F(CollectiveServiceTest, AnswersBothRanksWithTheSum) {
  absl::StatusOr<proto::CollectiveResponse> zero;
  std::thread rank0([&] { zero = Call(Request(0, 1.5f)); });
  absl::StatusOr<proto::CollectiveResponse> one = Call(Request(1, 2.0f));
  rank0.join();
  for (const auto* answer : {&zero, &one}) {
    ASSERT_TRUE(answer->ok()) << answer->status();
    float sum = 0;
    ASSERT_EQ((*answer)->data().size(), 4u);
    std::memcpy(&sum, (*answer)->data().data(), 4);
    EXPECT_EQ(sum, 3.5f);
  }
}

TEST_F(CollectiveServiceTest, RefusesAnotherJobAndAnUnknownRank) {
  proto::CollectiveRequest other_job = Request(0, 1);
  other_job.mutable_header()->set_job_id("k");
  EXPECT_EQ(Call(other_job).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Call(Request(2, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  proto::CollectiveRequest no_kind = Request(0, 1);
  no_kind.set_kind(proto::CollectiveRequest::KIND_UNSPECIFIED);
  EXPECT_EQ(Call(no_kind).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::server
