#include "allreduce/grpc_store.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allreduce/rendezvous_client.h"
#include "allreduce/rendezvous_service.h"
#include "allreduce/rendezvous_state.h"
#include "gloo/common/error.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace ps::allreduce {
namespace {

// A coordinator on a free loopback port, and a client of it.
class GrpcStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    client_ =
        std::make_unique<RendezvousClient>(absl::StrCat("127.0.0.1:", port_));
  }
  void TearDown() override { server_->Shutdown(); }

  RendezvousState state_{2};
  RendezvousService service_{&state_, ""};
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<RendezvousClient> client_;
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
    RendezvousClient other(absl::StrCat("127.0.0.1:", port_));
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
    RendezvousClient client(absl::StrCat("127.0.0.1:", port_));
    other_round = client.Join(1, 2, "", absl::Seconds(60));
  });
  absl::StatusOr<uint64_t> round = client_->Join(0, 2, "", absl::Seconds(60));
  other.join();
  ASSERT_TRUE(round.ok()) << round.status();
  ASSERT_TRUE(other_round.ok()) << other_round.status();
  EXPECT_EQ(*round, *other_round);
}

TEST_F(GrpcStoreTest, ClientReportsAnUnreachableCoordinator) {
  server_->Shutdown();
  RendezvousClient client(absl::StrCat("127.0.0.1:", port_));
  absl::Status status = client.Set("k", "v");
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
}

}  // namespace
}  // namespace ps::allreduce
