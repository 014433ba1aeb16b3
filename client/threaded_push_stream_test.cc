#include "client/threaded_push_stream.h"

#include <thread>
#include <vector>

#include "client/pull_reader.h"
#include "client/push_stream_testing.h"
#include "gtest/gtest.h"

namespace ps::client_internal {
namespace {

using ::ps::client_internal::testing::FakeCall;
using ::ps::client_internal::testing::FakeShard;
using ::ps::client_internal::testing::FakeWeight;
using ::ps::client_internal::testing::PullAnswer;
using ::ps::client_internal::testing::StepFourSpec;
using ::ps::client_internal::testing::TestGradients;
using ::ps::client_internal::testing::TestPartition;

PushStreamSpec Spec(FakeShard* shard, const Partition* partition,
                    PushKind kind) {
  return StepFourSpec(shard, partition, /*server=*/0, kind);
}

// Enqueues every slice server 0 holds, from `gradients`.
void EnqueueAll(const Partition& partition, const TensorValues& gradients,
                PushStream& stream) {
  for (const Slice& slice : partition.SlicesOfServer(0)) {
    stream.Enqueue({slice, gradients[slice.tensor_id].data()});
  }
}

TEST(ThreadedPushStreamTest, StreamsEverySliceFromItsOwnThread) {
  const Partition partition = TestPartition();
  const TensorValues gradients = TestGradients(partition);
  FakeShard shard(0);
  ThreadCache threads;
  ThreadedPushStream stream(Spec(&shard, &partition, PushKind::kStep), threads);
  EnqueueAll(partition, gradients, stream);
  stream.Close(nullptr);
  ASSERT_TRUE(stream.Join().ok());
  const std::vector<FakeCall> calls = shard.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_TRUE(calls[0].writes_done);
  EXPECT_TRUE(calls[0].finished);
  const std::vector<Slice>& slices = partition.SlicesOfServer(0);
  ASSERT_EQ(calls[0].messages.size(), slices.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    EXPECT_EQ(calls[0].messages[i].chunk().tensor_id(), slices[i].tensor_id);
    EXPECT_EQ(calls[0].messages[i].chunk().offset(), slices[i].offset);
    EXPECT_NE(calls[0].writers[i], std::this_thread::get_id());
  }
}

TEST(ThreadedPushStreamTest, ARetryResendsEverySliceOnANewCall) {
  const Partition partition = TestPartition();
  const TensorValues gradients = TestGradients(partition);
  FakeShard shard(0);
  shard.Script({grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting"),
                {},
                /*writes_before_break=*/1});
  ThreadCache threads;
  ThreadedPushStream stream(Spec(&shard, &partition, PushKind::kStep), threads);
  EnqueueAll(partition, gradients, stream);
  stream.Close(nullptr);
  ASSERT_TRUE(stream.Join().ok());
  const std::vector<FakeCall> calls = shard.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_FALSE(calls[0].writes_done);  // Broken after its first write.
  EXPECT_EQ(calls[1].messages.size(), partition.SlicesOfServer(0).size());
  EXPECT_TRUE(calls[1].writes_done);
}

TEST(ThreadedPushStreamTest, APullAfterBringsBackTheShardsWeights) {
  const Partition partition = TestPartition();
  const TensorValues gradients = TestGradients(partition);
  FakeShard shard(0);
  shard.Script({grpc::Status::OK, PullAnswer(partition, 0, 12, 100)});
  ThreadCache threads;
  ThreadedPushStream stream(Spec(&shard, &partition, PushKind::kStepPullAfter),
                            threads);
  EnqueueAll(partition, gradients, stream);
  TensorValues weights;
  ShapeWeights(partition.model(), weights);
  stream.Close(&weights);
  ASSERT_TRUE(stream.Join().ok());
  EXPECT_EQ(stream.pulled_version(), 12u);
  EXPECT_EQ(shard.calls()[0].method, "PushPull");
  const Slice& first = partition.SlicesOfServer(0)[0];
  EXPECT_EQ(weights[first.tensor_id][first.offset],
            FakeWeight(first.tensor_id, first.offset));
}

TEST(ThreadedPushStreamTest, DestroyedBeforeJoinItCancelsTheCall) {
  const Partition partition = TestPartition();
  const TensorValues gradients = TestGradients(partition);
  FakeShard shard(0);
  {
    ThreadCache threads;
    ThreadedPushStream stream(Spec(&shard, &partition, PushKind::kStep),
                              threads);
    EnqueueAll(partition, gradients, stream);
  }
  const std::vector<FakeCall> calls = shard.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_FALSE(calls[0].writes_done);
  EXPECT_FALSE(calls[0].finished);
}

}  // namespace
}  // namespace ps::client_internal
