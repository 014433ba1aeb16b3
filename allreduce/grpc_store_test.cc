#include "allreduce/grpc_store.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allreduce/rendezvous_client.h"
#include "allreduce/ring_testing.h"
#include "gloo/common/error.h"
#include "gtest/gtest.h"

namespace ps::allreduce {
namespace {

// A coordinator on a free loopback port, and a client of it.
class GrpcStoreTest : public ::testing::Test {
 protected:
  InProcessCoordinator coordinator_{2, ""};
  std::unique_ptr<RendezvousClient> client_ =
      std::make_unique<RendezvousClient>(coordinator_.address());
};

TEST_F(GrpcStoreTest, GetReturnsWhatSetStoredUnderThePrefix) {
  GrpcStore store(client_.get(), "job/0");
  store.set("0", {'a', '\0', 'b'});
  EXPECT_EQ(store.get("0"), (std::vector<char>{'a', '\0', 'b'}));
  // Another round's keys are others.
  absl::StatusOr<std::vector<std::string>> raw =
      client_->Get({"job/0/0"}, absl::Seconds(1));
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->front(), std::string("a\0b", 3));
}

TEST_F(GrpcStoreTest, WaitReturnsOnceAnotherClientSetsTheKeys) {
  std::thread setter([this] {
    RendezvousClient other(coordinator_.address());
    GrpcStore store(&other, "p");
    store.set("1", {'x'});
    store.set("2", {'y'});
  });
  GrpcStore store(client_.get(), "p");
  store.wait({"1", "2"}, std::chrono::seconds(60));
  setter.join();
  EXPECT_EQ(store.get("2"), std::vector<char>{'y'});
}

TEST_F(GrpcStoreTest, WaitPastItsTimeoutThrowsAsGloosStoresDo) {
  GrpcStore store(client_.get(), "p");
  EXPECT_THROW(store.wait({"never"}, std::chrono::milliseconds(10)),
               gloo::IoException);
}

TEST_F(GrpcStoreTest, ClientJoinsWithTheOtherRank) {
  absl::StatusOr<uint64_t> other_round;
  std::thread other([&] {
    RendezvousClient client(coordinator_.address());
    other_round = client.Join(1, 2, "", absl::Seconds(60));
  });
  absl::StatusOr<uint64_t> round = client_->Join(0, 2, "", absl::Seconds(60));
  other.join();
  ASSERT_TRUE(round.ok()) << round.status();
  ASSERT_TRUE(other_round.ok()) << other_round.status();
  EXPECT_EQ(*round, *other_round);
}

TEST_F(GrpcStoreTest, ClientReportsAnUnreachableCoordinator) {
  coordinator_.Shutdown();
  RendezvousClient client(coordinator_.address());
  absl::Status status = client.Set("k", "v");
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
}

}  // namespace
}  // namespace ps::allreduce
