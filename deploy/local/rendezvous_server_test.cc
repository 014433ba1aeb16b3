#include "deploy/local/rendezvous_server.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

RendezvousOptions OneHost() {
  RendezvousOptions options;
  options.job_id = "job-1";
  options.plan = *PlanHosts(1, 1, 1, 0);
  return options;
}

// What a peer that is not our launcher might send.
TEST(RendezvousServerTest, RefusesMalformedRequestsWithInvalidArgument) {
  RendezvousState state(OneHost(), absl::Now());
  absl::StatusOr<std::unique_ptr<RendezvousServer>> server =
      RendezvousServer::Start("127.0.0.1:0", &state);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = rendezvous::Rendezvous::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                          grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    rendezvous::JoinRequest request;
    request.set_num_hosts(1);
    request.set_host_index(5);
    request.set_address("x");
    rendezvous::JoinResponse response;
    EXPECT_EQ(stub->Join(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext context;
    rendezvous::OutcomeRequest request;
    request.set_exit_code(1);  // A failure without its message.
    rendezvous::OutcomeResponse response;
    EXPECT_EQ(stub->ReportOutcome(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext context;
    rendezvous::HeartbeatRequest request;  // Host 0 has not joined.
    rendezvous::HeartbeatResponse response;
    EXPECT_EQ(stub->Heartbeat(&context, request, &response).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
}

TEST(RendezvousServerTest, APortInUseIsAnError) {
  RendezvousState state(OneHost(), absl::Now());
  absl::StatusOr<std::unique_ptr<RendezvousServer>> first =
      RendezvousServer::Start("127.0.0.1:0", &state);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<RendezvousServer>> second =
      RendezvousServer::Start(absl::StrCat("127.0.0.1:", (*first)->port()),
                              &state);
  EXPECT_FALSE(second.ok());
}

}  // namespace
}  // namespace ps
