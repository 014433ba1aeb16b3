// Register as the service serves it (server/register_handler.h): the
// header checked, the model declared by rank 0 or matched, the rank
// registered.
#include "server/register_handler.h"

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/parameter_service_testing.h"

namespace ps::server::testing {
namespace {

TEST_F(ParameterServiceTest, RegisterReportsModeWorkersAndVersion) {
  Start(ConsistencyMode::kSsp);
  grpc::ClientContext context;
  proto::RegisterRequest request;
  *request.mutable_header() = Header(1);
  ModelSpecToProto(model_, request.mutable_declaration());
  request.set_incarnation(77);
  proto::RegisterResponse response;
  ASSERT_TRUE(stub_->Register(&context, request, &response).ok());
  EXPECT_EQ(response.mode(), proto::MODE_SSP);
  EXPECT_EQ(response.num_workers(), kWorkers);
  EXPECT_EQ(response.version(), 0u);
  EXPECT_EQ(response.next_step(), 0u);
}

TEST_F(ParameterServiceTest, RegisterRefusesAMismatchedWorker) {
  Start(ConsistencyMode::kSync);
  struct Case {
    std::function<void(proto::RegisterRequest&)> mutate;
    const char* text;
    grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT;
  };
  const Case cases[] = {
      {[](proto::RegisterRequest& r) {
         r.mutable_declaration()->mutable_tensors(3)->set_shape(0, 6);
       },
       "register refused: tensor 3 \"fc1.bias\" shape: [6] declared by rank "
       "0, [5] by rank 0",
       grpc::StatusCode::FAILED_PRECONDITION},
      {[](proto::RegisterRequest& r) {
         r.mutable_declaration()->mutable_tensors()->RemoveLast();
       },
       "rank 0 declares 3 tensors, rank 0 4: tensor 3 \"fc1.bias\"",
       grpc::StatusCode::FAILED_PRECONDITION},
      {[](proto::RegisterRequest& r) {
         r.mutable_declaration()->mutable_tensors(0)->set_name("");
       },
       "tensor 0 \"\": the name is empty"},
      {[](proto::RegisterRequest& r) {
         r.mutable_header()->set_partition_fingerprint(1);
       },
       "partition fingerprint"},
      {[](proto::RegisterRequest& r) {
         r.mutable_header()->set_server_index(0);
       },
       "request is for server 0 but this is server 1"},
      {[](proto::RegisterRequest& r) {
         r.mutable_header()->set_worker_rank(2);
       },
       "worker rank 2 is outside [0, 2)"},
      {[](proto::RegisterRequest& r) {
         r.mutable_header()->set_protocol_version(0);
       },
       "protocol version 0"},
  };
  for (const Case& c : cases) {
    grpc::ClientContext context;
    proto::RegisterRequest request;
    *request.mutable_header() = Header(0);
    ModelSpecToProto(model_, request.mutable_declaration());
    c.mutate(request);
    proto::RegisterResponse response;
    grpc::Status s = stub_->Register(&context, request, &response);
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    EXPECT_NE(s.error_message().find(c.text), std::string::npos)
        << s.error_message();
  }
}

TEST_F(ParameterServiceTest, RanksWaitForRank0sDeclarationAndMustMatchIt) {
  declare_at_start_ = false;
  Start(ConsistencyMode::kSync);
  // Before any declaration: rank 1 is told to retry, the rest is refused.
  grpc::Status s = Declare(1, model_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("rank 0 has not declared the model yet"),
            std::string::npos)
      << s.error_message();
  Weights weights;
  uint64_t version = 0;
  s = Pull(0, 0, &weights, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("before any model was declared"),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(Stats().report().find("no model declared"), std::string::npos);

  ASSERT_TRUE(Declare(0, model_).ok());
  ASSERT_NE(store_, nullptr);
  ModelSpec other = model_;
  other.tensors[2].initializer = InitializerSpec::Normal(0, 1);
  s = Declare(1, other);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find(
                "tensor 2 \"fc1.weight\" initializer: normal(0, 1) declared "
                "by rank 1, glorot_uniform(fan_in 30, fan_out 5) by rank 0"),
            std::string::npos)
      << s.error_message();
  EXPECT_TRUE(Declare(1, model_).ok());
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  EXPECT_EQ(weights, InitialWeights());
}

TEST_F(ParameterServiceTest, ARankThatNeverRegisteredCanOnlyRegister) {
  register_at_start_ = false;
  Start(ConsistencyMode::kAsync);
  const Weights before = InitialWeights();
  Weights weights;
  uint64_t version = 0;
  for (const grpc::Status& s :
       {Pull(0, 0, &weights, &version), Push(ValidPush(0, 0, 1.0f), &version),
        PushPull(ValidPush(0, 0, 1.0f), 0, &weights, &version)}) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find("worker 0 has not registered"),
              std::string::npos)
        << s.error_message();
  }
  Register(0, Incarnation(0));
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  EXPECT_EQ(weights, before);
  // A request without the incarnation it registered with is refused too.
  proto::PullRequest request;
  *request.mutable_header() = Header(0);
  request.mutable_header()->clear_incarnation();
  const grpc::Status s = SendPull(request, &weights, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("carries no incarnation"), std::string::npos)
      << s.error_message();
}

TEST_F(ParameterServiceTest, ADeclarationOverTheLimitsIsRefused) {
  declare_at_start_ = false;
  limits_.max_model_bytes = 1000;
  Start(ConsistencyMode::kSync);
  const grpc::Status s = Declare(0, model_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("larger than the servers' limit of 1000 "
                                   "bytes (--max_model_bytes)"),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(host_->get(), nullptr);
}

// ServeRegister on its own, without the service: what it declares, and
// what a refused rank 0 leaves behind.
TEST_F(ParameterServiceTest, ServeRegisterDeclaresTheModelAndAnswersTheRank) {
  declare_at_start_ = false;
  Start(ConsistencyMode::kSsp);
  proto::RegisterRequest request;
  *request.mutable_header() = Header(0);
  ModelSpecToProto(model_, request.mutable_declaration());
  request.set_incarnation(Incarnation(0));
  proto::RegisterResponse response;
  const ShardIdentity identity{0, kServer, kWorkers, job_id_};
  ASSERT_TRUE(ServeRegister(request, identity, *host_, &response).ok());
  ASSERT_NE(host_->get(), nullptr);
  EXPECT_EQ(response.mode(), proto::MODE_SSP);
  EXPECT_EQ(response.num_workers(), kWorkers);
  EXPECT_EQ(response.next_step(), 0u);
  EXPECT_TRUE(coordinator_->CheckRegistered(0, Incarnation(0)).ok());
  EXPECT_FALSE(response.has_local_endpoint()) << "the service's to add";
}

TEST_F(ParameterServiceTest, ServeRegisterRefusedLeavesNoModelBehind) {
  declare_at_start_ = false;
  Start(ConsistencyMode::kSync);
  proto::RegisterRequest request;
  *request.mutable_header() = Header(0);
  // Right for the identity checked first, wrong for the declared model.
  request.mutable_header()->set_partition_fingerprint(1);
  ModelSpecToProto(model_, request.mutable_declaration());
  request.set_incarnation(Incarnation(0));
  proto::RegisterResponse response;
  const absl::Status s = ServeRegister(request, {0, kServer, kWorkers, job_id_},
                                       *host_, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("partition fingerprint"), absl::string_view::npos)
      << s;
  EXPECT_EQ(s.message().find("register refused"), absl::string_view::npos)
      << "the service prefixes it: " << s;
  EXPECT_EQ(host_->get(), nullptr);
  EXPECT_EQ(response.num_workers(), 0);
}

}  // namespace
}  // namespace ps::server::testing
