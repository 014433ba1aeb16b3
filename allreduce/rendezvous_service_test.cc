#include "allreduce/rendezvous_service.h"

#include <string>

#include "allreduce/rendezvous_state.h"
#include "gtest/gtest.h"
#include "proto/ring_rendezvous.pb.h"

namespace ps::allreduce {
namespace {

// The service's checks, called directly (gRPC's transport adds nothing they
// depend on).
class RendezvousServiceTest : public ::testing::Test {
 protected:
  RendezvousState state_{1};
  RendezvousService service_{&state_, "job-a"};
  grpc::ServerContext context_;
};

TEST_F(RendezvousServiceTest, JoinsTheRoundOfAOneWorkerJob) {
  proto::JoinRequest request;
  request.set_rank(0);
  request.set_num_workers(1);
  request.set_job_id("job-a");
  proto::JoinReply reply;
  ASSERT_TRUE(service_.Join(&context_, &request, &reply).ok());
  EXPECT_EQ(reply.round(), 0);
}

TEST_F(RendezvousServiceTest, RefusesAnotherJob) {
  proto::JoinRequest request;
  request.set_num_workers(1);
  request.set_job_id("job-b");
  proto::JoinReply reply;
  EXPECT_EQ(service_.Join(&context_, &request, &reply).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(RendezvousServiceTest, RefusesAnotherWorkerCountAndBadRanks) {
  proto::JoinRequest request;
  request.set_job_id("job-a");
  request.set_num_workers(2);
  proto::JoinReply reply;
  EXPECT_EQ(service_.Join(&context_, &request, &reply).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  request.set_num_workers(1);
  request.set_rank(1);
  EXPECT_EQ(service_.Join(&context_, &request, &reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(RendezvousServiceTest, SetThenGet) {
  proto::SetRequest set;
  set.set_key("k");
  set.set_value(std::string("v\0w", 3));
  proto::SetReply set_reply;
  ASSERT_TRUE(service_.Set(&context_, &set, &set_reply).ok());
  proto::GetRequest get;
  get.add_keys("k");
  proto::GetReply get_reply;
  ASSERT_TRUE(service_.Get(&context_, &get, &get_reply).ok());
  ASSERT_EQ(get_reply.values_size(), 1);
  EXPECT_EQ(get_reply.values(0), std::string("v\0w", 3));
}

TEST_F(RendezvousServiceTest, GetOfAMissingKeyEndsAtItsTimeout) {
  proto::GetRequest get;
  get.add_keys("never");
  get.set_timeout_ms(5);
  proto::GetReply reply;
  EXPECT_EQ(service_.Get(&context_, &get, &reply).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_F(RendezvousServiceTest, RefusesEmptyOrOversizedKeysAndValues) {
  proto::SetRequest set;
  proto::SetReply reply;
  EXPECT_EQ(service_.Set(&context_, &set, &reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  set.set_key(std::string(RendezvousService::kMaxKeyBytes + 1, 'k'));
  EXPECT_EQ(service_.Set(&context_, &set, &reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  set.set_key("k");
  set.set_value(std::string(RendezvousService::kMaxValueBytes + 1, 'v'));
  EXPECT_EQ(service_.Set(&context_, &set, &reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  proto::GetRequest get;
  proto::GetReply get_reply;
  EXPECT_EQ(service_.Get(&context_, &get, &get_reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace ps::allreduce
