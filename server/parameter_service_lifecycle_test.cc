// ParameterService's Heartbeat, Done and Barrier: how a worker stays alive,
// ends its part, and waits for the others.
#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/parameter_service_testing.h"

namespace ps::server::testing {
namespace {

TEST_F(ParameterServiceTest, HeartbeatsKeepAWorkerAliveAndNameItsProcess) {
  constexpr absl::Duration kLease = absl::Milliseconds(500);
  register_at_start_ = false;
  Start(ConsistencyMode::kSync, kLease);
  auto heartbeat = [&](int rank, uint64_t incarnation) {
    grpc::ClientContext context;
    proto::HeartbeatRequest request;
    *request.mutable_header() = Header(rank);
    request.set_incarnation(incarnation);
    proto::HeartbeatResponse response;
    return stub_->Heartbeat(&context, request, &response);
  };
  {
    grpc::ClientContext context;
    proto::RegisterRequest request;
    *request.mutable_header() = Header(0);
    ModelSpecToProto(model_, request.mutable_declaration());
    request.set_incarnation(5);
    proto::RegisterResponse response;
    ASSERT_TRUE(stub_->Register(&context, request, &response).ok());
  }
  // Rank 0 beats every 100 ms; rank 1 is silent and dies. Checked once
  // rank 1 is dead and rank 0 has beaten steadily for two leases (or after
  // a minute): a beat more than half a lease late (this thread stalled on a
  // loaded machine) could let even a renewed lease run out, so it starts
  // the count again.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  absl::Time last_beat = absl::Now();
  absl::Time steady_since = last_beat;
  std::vector<int> blocking;
  for (;;) {
    ASSERT_TRUE(heartbeat(0, 5).ok());
    // A stranger's beats for rank 1, which never registered, keep nothing
    // alive.
    const grpc::Status stranger = heartbeat(1, 9);
    EXPECT_EQ(stranger.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(stranger.error_message().find(
                  "worker 1 has not registered with this server"),
              std::string::npos)
        << stranger.error_message();
    absl::SleepFor(kLease / 5);
    blocking = coordinator_->RanksBlocking(1);
    const absl::Time now = absl::Now();
    if (now - last_beat > kLease / 2) steady_since = now;
    last_beat = now;
    if ((now - steady_since >= 2 * kLease &&
         blocking != std::vector<int>{0, 1}) ||
        now >= give_up) {
      break;
    }
  }
  EXPECT_EQ(blocking, std::vector<int>{0});
  grpc::Status stale = heartbeat(0, 4);
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(
      stale.error_message().find("worker 0 registered as incarnation 5, not 4"),
      std::string::npos)
      << stale.error_message();
  EXPECT_EQ(heartbeat(2, 5).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ParameterServiceTest, DoneFromEveryRankSignalsShutdownOnce) {
  Start(ConsistencyMode::kSync);
  Register(0, 10);
  Register(1, 11);
  EXPECT_EQ(Done(1, 11, 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Done(1, 11).ok());
  ASSERT_TRUE(Done(1, 11).ok());
  EXPECT_FALSE(all_done_.HasBeenNotified());
  ASSERT_TRUE(Done(0, 10).ok());
  EXPECT_TRUE(all_done_.HasBeenNotified());
  ASSERT_TRUE(Done(0, 10).ok());  // Notifying twice would crash.
}

TEST_F(ParameterServiceTest, DoneOnlyFromTheProcessThatRegistered) {
  register_at_start_ = false;
  Start(ConsistencyMode::kSync);
  Register(0, 10);
  struct Case {
    int rank;
    uint64_t incarnation;
    const char* text;
  };
  for (const Case& c : {
           Case{1, 11, "worker 1 has not registered with this server"},
           Case{0, 0, "worker 0 registered as incarnation 10, not 0"},
           Case{0, 99, "worker 0 registered as incarnation 10, not 99"},
       }) {
    const grpc::Status s = Done(c.rank, c.incarnation);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << c.text;
    EXPECT_NE(s.error_message().find(c.text), std::string::npos)
        << s.error_message();
  }
  // Nothing was marked: the real rank 0 and rank 1 finish the job.
  EXPECT_NE(Stats().report().find("0=live 1=live"), std::string::npos)
      << Stats().report();
  Register(1, 11);
  ASSERT_TRUE(Done(0, 10).ok());
  EXPECT_FALSE(all_done_.HasBeenNotified());
  ASSERT_TRUE(Done(1, 11).ok());
  EXPECT_TRUE(all_done_.HasBeenNotified());
}

TEST_F(ParameterServiceTest, BarrierWaitsForEveryLiveRank) {
  Start(ConsistencyMode::kAsync);
  auto barrier = [this](int rank, uint64_t generation) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    proto::BarrierRequest request;
    *request.mutable_header() = Header(rank);
    request.set_generation(generation);
    proto::BarrierResponse response;
    return stub_->Barrier(&context, request, &response);
  };
  EXPECT_EQ(barrier(0, 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  std::atomic<bool> passed{false};
  std::thread rank0([&] {
    EXPECT_TRUE(barrier(0, 1).ok());
    passed = true;
  });
  // Rank 0 cannot pass before rank 1 arrives; once it has, both pass.
  EXPECT_FALSE(passed);
  EXPECT_TRUE(barrier(1, 1).ok());
  rank0.join();
  EXPECT_TRUE(passed);
}

}  // namespace
}  // namespace ps::server::testing
