#include "client/heartbeats.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace ps::client_internal {
namespace {

// A shard that records heartbeats and answers them with `endpoint`.
class HeartbeatShard final : public proto::ParameterServer::Service {
 public:
  explicit HeartbeatShard(std::string socket_name) {
    endpoint_.set_socket_name(std::move(socket_name));
    endpoint_.set_secret("s");
  }

  grpc::Status Heartbeat(grpc::ServerContext*,
                         const proto::HeartbeatRequest* request,
                         proto::HeartbeatResponse* response) override {
    absl::MutexLock lock(&mu_);
    requests_.push_back(*request);
    *response->mutable_local_endpoint() = endpoint_;
    return grpc::Status::OK;
  }

  // Waits for a heartbeat saying `clock`; returns it.
  proto::HeartbeatRequest AwaitClock(uint64_t clock) {
    absl::MutexLock lock(&mu_);
    auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !requests_.empty() && requests_.back().clock() >= clock;
    };
    mu_.Await(absl::Condition(&seen));
    return requests_.back();
  }

  size_t count() {
    absl::MutexLock lock(&mu_);
    return requests_.size();
  }

 private:
  proto::LocalEndpoint endpoint_;
  absl::Mutex mu_;
  std::vector<proto::HeartbeatRequest> requests_ ABSL_GUARDED_BY(mu_);
};

class HeartbeatsTest : public ::testing::Test {
 protected:
  HeartbeatsTest() {
    ClientOptions options;
    options.rank = 1;
    for (int s = 0; s < 2; ++s) {
      shards_.push_back(std::make_unique<HeartbeatShard>(
          absl::StrCat("paramserver-heartbeats-test-", s)));
      grpc::ServerBuilder builder;
      int port = 0;
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                               &port);
      builder.RegisterService(shards_.back().get());
      servers_.push_back(builder.BuildAndStart());
      const std::string address = absl::StrCat("127.0.0.1:", port);
      channels_.push_back(std::make_unique<ShardChannel>(
          s, address,
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()),
          /*partition_fingerprint=*/5, options));
      channels_.back()->set_incarnation(44);
    }
  }
  ~HeartbeatsTest() override {
    for (auto& server : servers_) server->Shutdown();
  }

  std::vector<ShardChannel*> Channels() {
    return {channels_[0].get(), channels_[1].get()};
  }

  std::vector<std::unique_ptr<HeartbeatShard>> shards_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::vector<std::unique_ptr<ShardChannel>> channels_;
};

TEST_F(HeartbeatsTest, EveryShardHearsTheRanksClockAndIncarnation) {
  Heartbeats heartbeats(Channels());
  heartbeats.RaiseClock(3);
  heartbeats.Start(absl::Milliseconds(1));
  for (int s = 0; s < 2; ++s) {
    const proto::HeartbeatRequest request = shards_[s]->AwaitClock(3);
    EXPECT_EQ(request.clock(), 3u);
    EXPECT_EQ(request.incarnation(), 44u);
    EXPECT_EQ(request.header().worker_rank(), 1);
    EXPECT_EQ(request.header().server_index(), s);
  }
  heartbeats.RaiseClock(8);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(shards_[s]->AwaitClock(8).clock(), 8u);
  }
}

TEST_F(HeartbeatsTest, TheClockNeverGoesBack) {
  Heartbeats heartbeats(Channels());
  EXPECT_EQ(heartbeats.clock(), 0u);
  heartbeats.RaiseClock(5);
  heartbeats.RaiseClock(2);
  EXPECT_EQ(heartbeats.clock(), 5u);
}

TEST_F(HeartbeatsTest, AnAnsweredEndpointReachesTheChannel) {
  ASSERT_FALSE(channels_[0]->HasLocalChannel());
  ASSERT_FALSE(channels_[1]->HasLocalChannel());
  Heartbeats heartbeats(Channels());
  // Each beat may take up to a period: a short one could time out on a
  // loaded machine, and the next beat tries again.
  heartbeats.Start(absl::Milliseconds(200));
  while (!channels_[0]->HasLocalChannel() || !channels_[1]->HasLocalChannel()) {
    absl::SleepFor(absl::Milliseconds(5));
  }
}

TEST_F(HeartbeatsTest, NeverStartedSendsNothing) {
  { Heartbeats heartbeats(Channels()); }
  EXPECT_EQ(shards_[0]->count(), 0u);
}

TEST(UnansweredShardTest, SaysWhomItWaitsForNowAndThenAndWhenItAnswers) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  UnansweredShard shard("server 0 (10.0.0.1:5)", absl::Seconds(10));
  EXPECT_EQ(shard.Answered(t0), std::nullopt) << "nothing to say";
  const absl::Status timeout = absl::DeadlineExceededError("Deadline Exceeded");
  EXPECT_EQ(shard.Failed(t0, timeout),
            "server 0 (10.0.0.1:5) has not answered a heartbeat "
            "(DEADLINE_EXCEEDED: Deadline Exceeded); this worker waits for "
            "it");
  EXPECT_EQ(shard.Failed(t0 + absl::Seconds(5), timeout), std::nullopt);
  EXPECT_EQ(shard.Failed(t0 + absl::Seconds(10), timeout),
            "server 0 (10.0.0.1:5) has not answered heartbeats for 10s "
            "(DEADLINE_EXCEEDED: Deadline Exceeded); this worker waits for "
            "it");
  EXPECT_EQ(shard.Answered(t0 + absl::Milliseconds(12500)),
            "server 0 (10.0.0.1:5) answers heartbeats again after 12s");
  EXPECT_EQ(shard.Answered(t0 + absl::Seconds(13)), std::nullopt);
  // A new run of failures is said at once.
  EXPECT_NE(shard.Failed(t0 + absl::Seconds(14), timeout), std::nullopt);
}

}  // namespace
}  // namespace ps::client_internal
