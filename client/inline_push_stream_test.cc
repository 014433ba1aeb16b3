#include "client/inline_push_stream.h"

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
  return StepFourSpec(shard, partition, /*server=*/1, kind);
}

// The hot path of a same-host push: each slice leaves as it is queued, the
// shard learns the push is complete at Close, and only Join waits.
TEST(InlinePushStreamTest, WritesEachSliceFromTheCallersThreadAsItComes) {
  const Partition partition = TestPartition();
  const TensorValues gradients = TestGradients(partition);
  FakeShard shard(1);
  InlinePushStream stream(Spec(&shard, &partition, PushKind::kStep));
  EXPECT_TRUE(shard.calls().empty());  // Opened with the first slice.
  const std::vector<Slice>& slices = partition.SlicesOfServer(1);
  for (size_t i = 0; i < slices.size(); ++i) {
    stream.Enqueue({slices[i], gradients[slices[i].tensor_id].data()});
    const std::vector<FakeCall> calls = shard.calls();
    ASSERT_EQ(calls.size(), 1u);
    ASSERT_EQ(calls[0].messages.size(), i + 1);
    EXPECT_EQ(calls[0].writers[i], std::this_thread::get_id());
    EXPECT_EQ(calls[0].messages[i].chunk().offset(), slices[i].offset);
  }
  EXPECT_FALSE(shard.calls()[0].writes_done);
  stream.Close(nullptr);
  EXPECT_TRUE(shard.calls()[0].writes_done);
  EXPECT_FALSE(shard.calls()[0].finished);
  ASSERT_TRUE(stream.Join().ok());
  EXPECT_TRUE(shard.calls()[0].finished);
  EXPECT_EQ(shard.calls().size(), 1u);
}

TEST(InlinePushStreamTest, ARetryInJoinResendsEverySliceOnANewCall) {
  const Partition partition = TestPartition();
  const TensorValues gradients = TestGradients(partition);
  FakeShard shard(1);
  shard.Script({grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting"),
                {},
                /*writes_before_break=*/0});
  InlinePushStream stream(Spec(&shard, &partition, PushKind::kStep));
  for (const Slice& slice : partition.SlicesOfServer(1)) {
    stream.Enqueue({slice, gradients[slice.tensor_id].data()});
  }
  stream.Close(nullptr);
  EXPECT_FALSE(shard.calls()[0].writes_done);  // Broken at once.
  ASSERT_TRUE(stream.Join().ok());
  const std::vector<FakeCall> calls = shard.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_TRUE(calls[0].messages.empty());
  EXPECT_EQ(calls[1].messages.size(), partition.SlicesOfServer(1).size());
  EXPECT_TRUE(calls[1].writes_done);
  EXPECT_TRUE(calls[1].finished);
}

TEST(InlinePushStreamTest, APullAfterBringsBackTheShardsWeights) {
  const Partition partition = TestPartition();
  const TensorValues gradients = TestGradients(partition);
  FakeShard shard(1);
  shard.Script({grpc::Status::OK, PullAnswer(partition, 1, 5, 13)});
  InlinePushStream stream(Spec(&shard, &partition, PushKind::kStepPullAfter));
  for (const Slice& slice : partition.SlicesOfServer(1)) {
    stream.Enqueue({slice, gradients[slice.tensor_id].data()});
  }
  TensorValues weights;
  ShapeWeights(partition.model(), weights);
  stream.Close(&weights);
  ASSERT_TRUE(stream.Join().ok());
  EXPECT_EQ(stream.pulled_version(), 5u);
  for (const Slice& slice : partition.SlicesOfServer(1)) {
    EXPECT_EQ(weights[slice.tensor_id][slice.offset],
              FakeWeight(slice.tensor_id, slice.offset));
  }
}

TEST(InlinePushStreamTest, DestroyedBeforeJoinItCancelsTheCall) {
  const Partition partition = TestPartition();
  const TensorValues gradients = TestGradients(partition);
  FakeShard shard(1);
  {
    InlinePushStream stream(Spec(&shard, &partition, PushKind::kStep));
    const Slice& slice = partition.SlicesOfServer(1)[0];
    stream.Enqueue({slice, gradients[slice.tensor_id].data()});
  }
  const std::vector<FakeCall> calls = shard.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].messages.size(), 1u);
  EXPECT_FALSE(calls[0].writes_done);
  EXPECT_FALSE(calls[0].finished);
}

}  // namespace
}  // namespace ps::client_internal
