// Floods against the real server binary on 127.0.0.1: a raw peer opens
// hundreds of calls in one rank's name and leaves them hanging (pushes
// half-sent, pulls never read). Every call beyond the server's bounds must
// end at once with RESOURCE_EXHAUSTED, the real rank must train on
// afterwards, and once the flood is over the server's resident memory must
// come back to within kMemoryMargin of what it was. Prints one row per
// flood: the statuses and the server's memory before, during and after.

#include <sys/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/chunk_wire.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "tests/hostile_peer.h"

namespace ps::testing {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr int kCalls = 200;
// The flood comes over several connections, as from several processes.
constexpr int kConnections = 4;
constexpr int kPushRounds = 3;
// The server's --max_calls_per_rank (its default).
constexpr int kCallsPerRank = 8;
// Elements of a push's first message: 1 MiB, as a worker's chunks.
constexpr size_t kChunkElements = 256 * 1024;
// How far above its memory before the flood the server may stay once the
// flood is over: the server's trimmer leaves up to 16 MiB free in malloc by
// design (server_main.cc), and the handler threads the flood started stay
// for later calls (at most --max_threads, 76 here, about 20 KiB each). A
// server that keeps what its threads freed stays 45-110 MiB above after
// these floods (measured when malloc gave each thread an arena of its own).
constexpr size_t kMemoryMargin = 24 * kMiB;

// Calls started all at once, each sending one message and then nothing,
// never reading: a client that leaves them hanging. A thread of its own
// collects how each call ends. Destroying it cancels every call still open
// (the client goes away) and waits for them to end.
class Flood {
 public:
  Flood(const std::string& address, int connections) {
    for (int i = 0; i < connections; ++i) {
      grpc::ChannelArguments args;
      // Channels with different arguments do not share a connection.
      args.SetInt("ps.test.flood_connection", i);
      stubs_.push_back(
          std::make_unique<grpc::GenericStub>(grpc::CreateCustomChannel(
              address, grpc::InsecureChannelCredentials(), args)));
    }
    poller_ = std::thread([this] { Poll(); });
  }

  ~Flood() {
    {
      absl::MutexLock lock(&mu_);
      for (std::unique_ptr<Call>& call : calls_) call->context.TryCancel();
      mu_.Await(absl::Condition(this, &Flood::AllEndedLocked));
    }
    queue_.Shutdown();
    poller_.join();
  }

  // Starts `n` calls of `method`, spread over the connections, each sending
  // `message` (the last of its side when `last`).
  void Start(int n, const std::string& method, const grpc::ByteBuffer& message,
             bool last) {
    absl::MutexLock lock(&mu_);
    for (int i = 0; i < n; ++i) {
      auto call = std::make_unique<Call>();
      call->stream = stubs_[i % stubs_.size()]->PrepareCall(&call->context,
                                                            method, &queue_);
      call->stream->StartCall(/*tag=*/nullptr);  // Corked: sent with Write.
      if (last) {
        call->stream->WriteLast(message, grpc::WriteOptions(), &call->wrote);
      } else {
        call->stream->Write(message, &call->wrote);
      }
      call->stream->Finish(&call->status, call.get());
      calls_.push_back(std::move(call));
    }
  }

  // Waits until `n` calls have ended or `timeout` passed; how many ended.
  int AwaitEnded(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]()
                      ABSL_SHARED_LOCKS_REQUIRED(mu_) { return ended_ >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
    return ended_;
  }

  // How many ended with each code, and one message of each.
  std::map<grpc::StatusCode, std::pair<int, std::string>> Ended() {
    absl::MutexLock lock(&mu_);
    std::map<grpc::StatusCode, std::pair<int, std::string>> ended;
    for (const std::unique_ptr<Call>& call : calls_) {
      if (!call->ended) continue;
      auto& [count, message] = ended[call->status.error_code()];
      if (count++ == 0) message = call->status.error_message();
    }
    return ended;
  }

 private:
  struct Call {
    Call() { context.set_initial_metadata_corked(true); }
    grpc::ClientContext context;
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream;
    grpc::Status status;
    bool ended = false;
    char wrote = 0;  // Its address tags the write, which nobody awaits.
  };

  bool AllEndedLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return ended_ == static_cast<int>(calls_.size());
  }

  void Poll() {
    void* tag = nullptr;
    bool ok = false;
    while (queue_.Next(&tag, &ok)) {
      absl::MutexLock lock(&mu_);
      for (std::unique_ptr<Call>& call : calls_) {
        if (call.get() == tag) {
          call->ended = true;
          ++ended_;
          break;
        }
      }
    }
  }

  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  grpc::CompletionQueue queue_;
  std::thread poller_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Call>> calls_ ABSL_GUARDED_BY(mu_);
  int ended_ ABSL_GUARDED_BY(mu_) = 0;
};

class FloodTest : public HostilePeerTest {
 protected:
  // 16 MiB of weights: more than a never-read pull's windows take, so a
  // pull the server accepts stays blocked writing.
  FloodTest() : HostilePeerTest(MlpModelSpec({2048, 2048, 10})) {}

  // Checks that `flood` had every call beyond the rank's bound refused at
  // once with RESOURCE_EXHAUSTED (a pull may instead have been served
  // whole); returns the row's status column.
  std::string ExpectRefused(Flood& flood, absl::string_view what) {
    const int ended = flood.AwaitEnded(kCalls - kCallsPerRank, kPeerTimeout);
    EXPECT_GE(ended, kCalls - kCallsPerRank)
        << what << ": calls beyond the bound still open";
    std::string statuses;
    for (const auto& [code, ended_with] : flood.Ended()) {
      const grpc::Status status(code, ended_with.second);
      absl::StrAppend(&statuses, statuses.empty() ? "" : "; ", ended_with.first,
                      " x ", CodeName(status), ": ", ended_with.second);
      EXPECT_TRUE(code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                  (code == grpc::StatusCode::OK && what == "pull"))
          << what << ": " << CodeName(status) << " " << ended_with.second;
    }
    return statuses;
  }

  void PrintRow(absl::string_view request, absl::string_view statuses,
                size_t before, size_t during, size_t after) {
    std::printf(
        "| resources | %s | %s | memory (VmRSS) before %s, during %s, after "
        "%s |\n",
        std::string(request).c_str(), std::string(statuses).c_str(),
        MiB(before).c_str(), MiB(during).c_str(), MiB(after).c_str());
    std::fflush(stdout);
  }

  // Rank 1's genuine push for `step`, retried while the server still counts
  // the flood's calls it has not yet seen cancelled.
  grpc::Status RealPush(uint64_t step, const TensorValues& gradients) {
    PushFields fields;
    fields.step = step;
    fields.examples_done = kPeerBatch * (step + 1);
    const absl::Time deadline = absl::Now() + kPeerTimeout;
    for (;;) {
      grpc::Status status = Push(fields, gradients);
      if (status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED ||
          absl::Now() > deadline) {
        return status;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

  // The server's memory once the flood is over: waits until it is back
  // within the margin of `before` (the trimmer runs every 2 s) or a minute
  // passed.
  size_t MemoryAfter(size_t before) {
    const absl::Time deadline = absl::Now() + kPeerTimeout;
    size_t now = ResidentBytes(server_->pid());
    while (now > before + kMemoryMargin && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(200));
      now = ResidentBytes(server_->pid());
    }
    return now;
  }
};

TEST_F(FloodTest, CallsBeyondTheBoundsAreRefusedAndMemoryComesBack) {
  StartServer("async");
  // One genuine step first: memory "before" holds what serving takes.
  const TensorValues gradients = Gradients(0.01f);
  ASSERT_TRUE(RealPush(0, gradients).ok());
  Weights start;
  ASSERT_TRUE(Snapshot(&start).ok());
  // The least over a few of the trimmer's periods: what that step left free
  // in malloc goes back first.
  size_t before = ResidentBytes(server_->pid());
  ASSERT_GT(before, 0u) << "cannot read the server's VmRSS";
  for (int i = 0; i < 25; ++i) {
    absl::SleepFor(absl::Milliseconds(200));
    before = std::min(before, ResidentBytes(server_->pid()));
  }

  // Pushes that send their first MiB and then nothing.
  PushFields fields;
  fields.step = 1;
  fields.examples_done = 2 * kPeerBatch;
  const grpc::ByteBuffer first_message = PushMessage(
      fields, 0, absl::MakeConstSpan(gradients[0]).first(kChunkElements));
  size_t during = 0;
  std::string statuses;
  for (int round = 0; round < kPushRounds; ++round) {
    Flood flood(address_, kConnections);
    flood.Start(kCalls, Method("Push"), first_message, /*last=*/false);
    statuses = ExpectRefused(flood, "push");
    during = std::max(during, ResidentBytes(server_->pid()));
  }
  size_t after = MemoryAfter(before);
  PrintRow(absl::StrCat(kPushRounds, " x ", kCalls,
                        " pushes of rank 1 sending 1 MiB of 16, then nothing, "
                        "over ",
                        kConnections, " connections"),
           statuses, before, during, after);
  EXPECT_LE(after, before + kMemoryMargin)
      << "the server kept " << MiB(after - before) << " after the push floods";

  // Pulls whose client never reads.
  proto::PullRequest pull;
  *pull.mutable_header() = Header(1, kPeerIncarnation);
  pull.set_clock(1);
  {
    Flood flood(address_, kConnections);
    flood.Start(kCalls, Method("Pull"), SerializeMessage(pull), /*last=*/true);
    statuses = ExpectRefused(flood, "pull");
    during = ResidentBytes(server_->pid());
  }
  after = MemoryAfter(before);
  PrintRow(absl::StrCat(kCalls, " pulls of rank 1 (16 MiB each) never read"),
           statuses, before, during, after);
  EXPECT_LE(after, before + kMemoryMargin)
      << "the server kept " << MiB(after - before) << " after the pull flood";

  // The real rank trains on, and nothing of the flood reached the weights:
  // its next step is applied exactly (async SGD at rate 0.1).
  ASSERT_TRUE(RealPush(1, gradients).ok());
  Weights end;
  ASSERT_TRUE(Snapshot(&end).ok());
  EXPECT_EQ(end.version, start.version + 1);
  size_t wrong = 0;
  for (size_t t = 0; t < end.values.size(); ++t) {
    for (size_t i = 0; i < end.values[t].size(); ++i) {
      const float expected = start.values[t][i] - 0.1f * gradients[t][i];
      if (!(std::abs(end.values[t][i] - expected) <= 1e-6f)) ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0u) << "weights not as one step of rank 1 makes them";
  EXPECT_TRUE(Alive());
}

}  // namespace
}  // namespace ps::testing
