// ParameterService as a whole: jobs, thread and per-rank call bounds,
// undecodable bytes, the health check.
#include "server/parameter_service.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/byte_stream_call.h"
#include "common/chunk_wire.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "server/parameter_service_testing.h"

namespace ps::server::testing {
namespace {

// Pulls in rank 0's name for clock 1, each on a thread of its own: in sync
// mode, with nobody pushing, they wait (holding a server thread each) until
// cancelled, unless the server refuses them. Counts how each ended.
class HangingPulls {
 public:
  HangingPulls(proto::ParameterServer::Stub* stub,
               const proto::RequestHeader& header, int count) {
    for (int i = 0; i < count; ++i) {
      contexts_.push_back(std::make_unique<grpc::ClientContext>());
    }
    for (int i = 0; i < count; ++i) {
      threads_.emplace_back([this, stub, header, i] {
        proto::PullRequest request;
        *request.mutable_header() = header;
        request.set_clock(1);
        auto reader = stub->Pull(contexts_[i].get(), request);
        proto::PullResponse response;
        while (reader->Read(&response)) {
        }
        const grpc::Status s = reader->Finish();
        absl::MutexLock lock(&mu_);
        if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          refusals_.push_back(s.error_message());
        } else {
          ++other_;
        }
      });
    }
  }
  ~HangingPulls() { CancelAndJoin(); }

  // Waits (a minute at most) until `n` pulls were refused.
  void AwaitRefused(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return static_cast<int>(refusals_.size()) >= n;
    };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(60));
  }

  void CancelAndJoin() {
    for (auto& context : contexts_) context->TryCancel();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  std::vector<std::string> refusals() {
    absl::MutexLock lock(&mu_);
    return refusals_;
  }
  // Pulls that ended otherwise than refused (cancelled, or answered).
  int other() {
    absl::MutexLock lock(&mu_);
    return other_;
  }

 private:
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  std::vector<std::string> refusals_ ABSL_GUARDED_BY(mu_);
  int other_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST_F(ParameterServiceTest, RefusesEveryRequestOfAnotherJob) {
  job_id_ = "run-a";
  Start(ConsistencyMode::kAsync);
  const std::string expected =
      "the request is of job \"run-b\" but this server is of job \"run-a\"";
  {
    grpc::ClientContext context;
    proto::RegisterRequest request;
    *request.mutable_header() = Header(0);
    request.mutable_header()->set_job_id("run-b");
    ModelSpecToProto(model_, request.mutable_declaration());
    proto::RegisterResponse response;
    const grpc::Status s = stub_->Register(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find(expected), std::string::npos)
        << s.error_message();
  }
  std::vector<proto::PushRequest> push = ValidPush(0, 0, 1.0f);
  for (proto::PushRequest& m : push) m.mutable_header()->set_job_id("run-b");
  uint64_t version = 0;
  const grpc::Status s = Push(push, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find(expected), std::string::npos)
      << s.error_message();
  // The job's own requests go through.
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  EXPECT_EQ(version, 1u);
}

TEST_F(ParameterServiceTest, CallsBeyondTheThreadBoundAreRefusedThenServed) {
  max_threads_ = 6;
  max_calls_per_rank_ = 0;  // The thread bound alone.
  Start(ConsistencyMode::kSync);
  constexpr int kPulls = 12;
  HangingPulls pulls(stub_.get(), Header(0), kPulls);
  pulls.AwaitRefused(1);
  // Nothing else ended: the others still wait, holding their threads.
  EXPECT_GT(pulls.refusals().size(), 0u);
  EXPECT_EQ(pulls.other(), 0);
  pulls.CancelAndJoin();
  EXPECT_LT(pulls.refusals().size(), static_cast<size_t>(kPulls));
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  // The threads come back as the cancelled pulls return: the server answers
  // again.
  grpc::Status stats;
  do {
    grpc::ClientContext context;
    proto::StatsResponse response;
    stats = stub_->Stats(&context, proto::StatsRequest(), &response);
    if (stats.ok()) break;
    EXPECT_EQ(stats.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < give_up);
  EXPECT_TRUE(stats.ok()) << stats.error_message();
}

TEST_F(ParameterServiceTest, OneRankCannotHoldMoreThanItsCalls) {
  max_calls_per_rank_ = 3;
  Start(ConsistencyMode::kSync);
  // Three are held, the rest refused.
  constexpr int kPulls = 6;
  HangingPulls pulls(stub_.get(), Header(0), kPulls);
  pulls.AwaitRefused(kPulls - 3);
  // Rank 1 is not held up by rank 0's calls (a pull for clock 0 is answered
  // at once; a push from it could complete the step the others wait for).
  proto::PullRequest request;
  *request.mutable_header() = Header(1);
  request.set_clock(0);
  Weights weights;
  uint64_t version = 0;
  EXPECT_TRUE(SendPull(request, &weights, &version).ok());
  EXPECT_EQ(pulls.other(), 0);
  pulls.CancelAndJoin();
  const std::vector<std::string> refusals = pulls.refusals();
  ASSERT_EQ(refusals.size(), static_cast<size_t>(kPulls - 3));
  EXPECT_NE(refusals[0].find(
                "worker 0 has 3 calls open on this server already; at most 3"),
            std::string::npos)
      << refusals[0];
}

// Pull and Push parse their messages themselves (common/chunk_wire.h), so
// bytes that are no protobuf at all must be refused as cleanly as bad values.
TEST_F(ParameterServiceTest, UndecodableMessagesAreRefusedAndApplyNothing) {
  Start(ConsistencyMode::kAsync);
  grpc::GenericStub generic(channel_);
  const grpc::Slice garbage("\x3a\x05\x32\x10xxx", 7);  // data overruns
  auto call = [&](absl::string_view method,
                  const std::vector<grpc::ByteBuffer>& messages) {
    grpc::ClientContext context;
    ByteStreamCall stream(
        &generic, absl::StrCat("/ps.proto.ParameterServer/", method), &context);
    for (const grpc::ByteBuffer& m : messages) {
      if (!stream.Write(m)) break;
    }
    stream.WritesDone();
    grpc::ByteBuffer response;
    while (stream.Read(&response)) {
    }
    return stream.Finish();
  };

  std::vector<grpc::ByteBuffer> push;
  for (const proto::PushRequest& m : ValidPush(0, 0, 1.0f)) {
    push.push_back(SerializeMessage(m));
  }
  push.emplace_back(&garbage, 1);
  grpc::Status status = call("Push", push);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find(
                "push refused: malformed ps.proto.PushRequest"),
            std::string::npos)
      << status.error_message();

  const grpc::Slice cut_short("\x10\xff", 2);  // a varint that never ends
  status = call("Pull", {grpc::ByteBuffer(&cut_short, 1)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find(
                "pull refused: malformed ps.proto.PullRequest"),
            std::string::npos)
      << status.error_message();

  status = call("Pull", {});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("carried no PullRequest"),
            std::string::npos)
      << status.error_message();

  Weights weights;
  uint64_t version = 0;
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  EXPECT_EQ(version, 0u);
  EXPECT_EQ(weights, InitialWeights()) << "a refused push changed weights";
}

TEST_F(ParameterServiceTest, AnswersTheStandardHealthCheck) {
  Start(ConsistencyMode::kSync);
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);  // HealthCheckRequest{service: ""}
  grpc::ByteBuffer response;
  absl::Notification finished;
  grpc::Status status;
  generic.UnaryCall(&context, "/grpc.health.v1.Health/Check",
                    grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      status = std::move(s);
                      finished.Notify();
                    });
  finished.WaitForNotification();
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING
}

}  // namespace
}  // namespace ps::server::testing
