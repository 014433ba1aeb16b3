// Floods that aim at the server's memory and threads, against the real
// server binary on 127.0.0.1: oversized Registers all at once, same-host
// connections that never say hello, and connections that stop half-way
// through large frames. Each prints the server's memory (RSS) or threads
// before, during and after, and checks them against the bound the server
// sets, with margins derived from that bound.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/byte_stream_call.h"
#include "common/declaration_proto.h"
#include "common/local_socket.h"
#include "common/raw_local_connection.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "tests/hostile_peer.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;

constexpr size_t kMiB = size_t{1} << 20;
constexpr int kFloodCalls = 72;
// The server's --max_threads with 3 workers (64 + 4 per worker): also its
// bound on same-host connections.
constexpr int kMaxConnections = 76;
// LocalStreamServerOptions::max_receiving_bytes (its default).
constexpr size_t kReceivingBound = 256 * kMiB;
// Largest frame a client may send (the default --max_message_mb is 33).
constexpr uint32_t kFrameBytes = 32 * kMiB;
// What the server may keep once a flood is over: the trimmer leaves up to
// 16 MiB free in malloc, and handler threads stay for later calls.
constexpr size_t kAfterMargin = 48 * kMiB;

// The highest RSS of `pid` while it lives, read from /proc until stopped.
class PeakSampler {
 public:
  explicit PeakSampler(pid_t pid)
      : pid_(pid), peak_(ResidentBytes(pid)), thread_([this] { Run(); }) {}
  ~PeakSampler() { Stop(); }
  size_t Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    return peak_.load();
  }

 private:
  void Run() {
    while (!stop_.load()) {
      peak_.store(std::max(peak_.load(), ResidentBytes(pid_)));
      absl::SleepFor(absl::Milliseconds(2));
    }
  }
  const pid_t pid_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> peak_;
  std::thread thread_;
};

// Waits until the server's RSS is at most `bound`, or a minute passed;
// returns the last reading.
size_t AwaitResidentAtMost(pid_t pid, size_t bound) {
  const absl::Time deadline = absl::Now() + kPeerTimeout;
  size_t now = ResidentBytes(pid);
  while (now > bound && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    now = ResidentBytes(pid);
  }
  return now;
}

class HostileMemoryTest : public HostilePeerTest {
 protected:
  // The same-host endpoint, as rank 1's Register answer gives it.
  proto::LocalEndpoint Endpoint() {
    proto::RegisterRequest request;
    *request.mutable_header() = Header(1, kPeerIncarnation);
    ModelSpecToProto(model_, request.mutable_declaration());
    request.set_incarnation(kPeerIncarnation);
    request.set_planned_steps(kPeerPlannedSteps);
    request.set_max_examples_per_push(kPeerBatch);
    proto::RegisterResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPeerTimeout));
    EXPECT_TRUE(stub_->Register(&context, request, &response).ok());
    return response.local_endpoint();
  }
};

TEST_F(HostileMemoryTest, OversizedRegistersAllAtOnceAreRefusedUnparsed) {
  LaunchServer("sync");
  ASSERT_FALSE(HasFatalFailure());
  const pid_t pid = server_->pid();
  // 1.9 M tensors of short names: 27 MB, under the size bound of 100,000
  // tensors of 256-byte names, over the count.
  proto::RegisterRequest request;
  *request.mutable_header() = Header(0, 91);
  request.set_incarnation(91);
  for (int i = 0; i < 1900000; ++i) {
    proto::TensorDeclaration* t = request.mutable_declaration()->add_tensors();
    t->set_name(absl::StrCat("t", i));
    t->add_shape(1);
  }
  std::string bytes = request.SerializeAsString();
  request.Clear();
  grpc::Slice slice(bytes.data(), bytes.size());
  const grpc::ByteBuffer message(&slice, 1);
  const size_t before = ResidentBytes(pid);
  const int threads_before = ThreadCount(pid);
  PeakSampler sampler(pid);
  // Over several connections, as from several processes; every call sent
  // before any answer is read.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int i = 0; i < 8; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", i);  // A connection of its own.
    channels.push_back(grpc::CreateCustomChannel(
        address_, grpc::InsecureChannelCredentials(), args));
    stubs.push_back(std::make_unique<grpc::GenericStub>(channels.back()));
  }
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<ByteStreamCall>> calls;
  for (int i = 0; i < kFloodCalls; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(
        absl::ToChronoTime(absl::Now() + kPeerTimeout));
    calls.push_back(std::make_unique<ByteStreamCall>(
        stubs[i % stubs.size()].get(), Method("Register"),
        contexts.back().get()));
  }
  std::vector<std::thread> senders;
  for (int i = 0; i < kFloodCalls; ++i) {
    senders.emplace_back([&, i] { calls[i]->WriteLast(message); });
  }
  for (std::thread& t : senders) t.join();
  const int threads_during = ThreadCount(pid);
  int refused = 0;
  for (std::unique_ptr<ByteStreamCall>& call : calls) {
    grpc::ByteBuffer response;
    call->Read(&response);
    const grpc::Status status = call->Finish();
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
        status.error_message().find("1900000 tensors") != std::string::npos) {
      ++refused;
    }
  }
  // The connections go, as the peer's processes would.
  calls.clear();
  contexts.clear();
  stubs.clear();
  channels.clear();
  const size_t peak = sampler.Stop();
  const size_t after = AwaitResidentAtMost(pid, before + kAfterMargin);
  std::printf(
      "| resources | %d Registers of %s (1.9 M tensors) at once | "
      "%d refused | RSS %s, peak %s, %s | threads %d, %d, %d |\n",
      kFloodCalls, MiB(bytes.size()).c_str(), refused, MiB(before).c_str(),
      MiB(peak).c_str(), MiB(after).c_str(), threads_before, threads_during,
      ThreadCount(pid));
  std::fflush(stdout);
  EXPECT_EQ(refused, kFloodCalls);
  // Unparsed, a Register costs its bytes as gRPC received them, at most
  // all of them at once; parsed, one cost 600 MiB.
  EXPECT_LT(peak, before + kFloodCalls * bytes.size() + kAfterMargin);
  EXPECT_LE(after, before + kAfterMargin);
  EXPECT_THAT(Report(), HasSubstr("no model declared"));
  EXPECT_TRUE(Alive());
}

TEST_F(HostileMemoryTest, ConnectionsWithoutTheSecretAreClosedSoon) {
  // The idle limit is far beyond the test's patience; the hello wait is not.
  StartServer("async", {"--stream_idle_timeout=1h"});
  ASSERT_FALSE(HasFatalFailure());
  const pid_t pid = server_->pid();
  const proto::LocalEndpoint endpoint = Endpoint();
  ASSERT_FALSE(endpoint.socket_name().empty());
  const int threads_before = ThreadCount(pid);
  std::vector<std::unique_ptr<RawLocalConnection>> silent;
  for (int i = 0; i < kMaxConnections + 4; ++i) {
    silent.push_back(
        std::make_unique<RawLocalConnection>(endpoint.socket_name()));
    ASSERT_TRUE(silent.back()->ok());
  }
  const int threads_during = ThreadCount(pid);
  int closed = 0;
  const absl::Time deadline = absl::Now() + kPeerTimeout;
  for (auto& c : silent) {
    const int left = static_cast<int>(absl::ToInt64Seconds(
        std::max(deadline - absl::Now(), absl::Seconds(1))));
    closed += c->AwaitClosed(left) ? 1 : 0;
  }
  silent.clear();
  // A worker's connection is taken again.
  RawLocalConnection worker(endpoint.socket_name());
  ASSERT_TRUE(worker.ok());
  const bool welcomed = worker.Hello(endpoint.secret());
  std::printf(
      "| resources | %d same-host connections that never say hello "
      "| %d closed by the server | threads %d, %d, %d |\n",
      kMaxConnections + 4, closed, threads_before, threads_during,
      ThreadCount(pid));
  std::fflush(stdout);
  EXPECT_EQ(closed, kMaxConnections + 4);
  EXPECT_TRUE(welcomed);
  EXPECT_TRUE(Alive());
}

TEST_F(HostileMemoryTest, HalfSentFramesHoldAtMostTheReceivingBound) {
  StartServer("async");
  ASSERT_FALSE(HasFatalFailure());
  const pid_t pid = server_->pid();
  const proto::LocalEndpoint endpoint = Endpoint();
  ASSERT_FALSE(endpoint.socket_name().empty());
  const size_t before = ResidentBytes(pid);
  const int threads_before = ThreadCount(pid);
  PeakSampler sampler(pid);
  // Each connection holds the secret, starts a push and sends all but the
  // last byte of a 32 MiB message.
  std::vector<std::unique_ptr<RawLocalConnection>> connections;
  int held = 0;
  for (int i = 0; i < kFloodCalls; ++i) {
    connections.push_back(
        std::make_unique<RawLocalConnection>(endpoint.socket_name()));
    RawLocalConnection& c = *connections.back();
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c.Hello(endpoint.secret()));
    ASSERT_TRUE(c.SendFrame(FrameType::kCall, Method("Push")));
    if (c.SendHeader(FrameType::kMessage, kFrameBytes) &&
        c.SendZeros(kFrameBytes - 1)) {
      ++held;
    }
  }
  const size_t during = ResidentBytes(pid);
  const int threads_during = ThreadCount(pid);
  // Rank 1 goes on meanwhile.
  const grpc::Status pushed = Push(PushFields(), Gradients(0.01f));
  connections.clear();
  const size_t peak = sampler.Stop();
  const size_t after = AwaitResidentAtMost(pid, before + kAfterMargin);
  std::printf(
      "| resources | %d same-host connections, each 32 MiB less a "
      "byte of a push | %d sent whole, the rest cut | RSS %s, %s "
      "(peak %s), %s | threads %d, %d, %d | rank 1's push %s |\n",
      kFloodCalls, held, MiB(before).c_str(), MiB(during).c_str(),
      MiB(peak).c_str(), MiB(after).c_str(), threads_before, threads_during,
      ThreadCount(pid), CodeName(pushed).c_str());
  std::fflush(stdout);
  EXPECT_TRUE(pushed.ok()) << pushed.error_message();
  // Frames in flight hold at most the bound; add a thread stack and a
  // socket buffer per connection.
  EXPECT_LT(peak, before + kReceivingBound + kFloodCalls * kMiB + kAfterMargin);
  EXPECT_LE(after, before + kAfterMargin);
  EXPECT_TRUE(Alive());
}

}  // namespace
}  // namespace ps::testing
