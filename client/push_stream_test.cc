#include "client/push_stream.h"

#include <cstring>
#include <string>
#include <vector>

#include "client/pull_reader.h"
#include "client/push_stream_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::client_internal {
namespace {

using ::ps::client_internal::testing::FakeCall;
using ::ps::client_internal::testing::FakeShard;
using ::ps::client_internal::testing::FakeWeight;
using ::ps::client_internal::testing::PullAnswer;
using ::ps::client_internal::testing::TestPartition;
using ::testing::ElementsAre;

StepInfo TestStep() {
  StepInfo info;
  info.step = 9;
  info.base_version = 8;
  info.num_examples = 32;
  info.cursor = {2, 640};
  info.learning_rate = 0.25f;
  return info;
}

std::vector<float> Values(const proto::PushRequest& request) {
  std::vector<float> values(request.chunk().data().size() / sizeof(float));
  std::memcpy(values.data(), request.chunk().data().data(),
              values.size() * sizeof(float));
  return values;
}

TEST(PushCallsTest, CallsPushOrPushPullAsTheKindSays) {
  const Partition partition = TestPartition();
  FakeShard shard(0);
  for (PushKind kind :
       {PushKind::kStep, PushKind::kStepPullAfter, PushKind::kInitialValues}) {
    PushCalls calls({&shard, &partition, 0, TestStep(), kind, 7});
    calls.Open();
  }
  std::vector<std::string> methods;
  for (const FakeCall& call : shard.calls()) methods.push_back(call.method);
  EXPECT_THAT(methods, ElementsAre("Push", "PushPull", "Push"));
}

TEST(PushCallsTest, WritesASliceAsChunksPointingAtTheGradient) {
  const Partition partition = TestPartition();
  FakeShard shard(1);
  PushCalls calls({&shard, &partition, 1, TestStep(), PushKind::kStep, 7});
  std::vector<float> gradient(30);
  for (size_t i = 0; i < gradient.size(); ++i) gradient[i] = 0.5f * i;
  const Slice slice = {/*tensor_id=*/1, /*offset=*/4, /*num_elements=*/17,
                       /*server=*/1};
  std::unique_ptr<ClientStream> call = calls.Open();
  ASSERT_TRUE(calls.Write({slice, gradient.data()}, *call));
  const std::vector<proto::PushRequest> messages = shard.calls()[0].messages;
  ASSERT_EQ(messages.size(), 3u);  // 7 + 7 + 3 elements.
  uint64_t offset = 4;
  for (const proto::PushRequest& m : messages) {
    EXPECT_EQ(m.header().server_index(), 1u);
    EXPECT_EQ(m.header().incarnation(), 77u);
    EXPECT_EQ(m.step(), 9u);
    EXPECT_EQ(m.base_version(), 8u);
    EXPECT_EQ(m.num_examples(), 32u);
    EXPECT_EQ(m.epoch(), 2u);
    EXPECT_EQ(m.examples_done(), 640u);
    EXPECT_EQ(m.learning_rate(), 0.25f);
    EXPECT_FALSE(m.initial_values());
    EXPECT_EQ(m.max_pull_chunk_elements(), 0u);
    EXPECT_EQ(m.chunk().tensor_id(), 1u);
    EXPECT_EQ(m.chunk().dtype(), proto::DTYPE_FLOAT32);
    EXPECT_THAT(m.chunk().shape(), ElementsAre(30));
    EXPECT_EQ(m.chunk().offset(), offset);
    const std::vector<float> values = Values(m);
    ASSERT_EQ(values.size(), m.chunk().num_elements());
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(values[i], gradient[offset + i]);
    }
    offset += values.size();
  }
  EXPECT_EQ(offset, 4u + 17u);
}

TEST(PushCallsTest, MarksInitialValuesAndAPullAftersChunkSize) {
  const Partition partition = TestPartition();
  FakeShard shard(0);
  std::vector<float> gradient(30, 1.0f);
  const Slice slice = {/*tensor_id=*/1, /*offset=*/0, /*num_elements=*/30};
  PushCalls initial(
      {&shard, &partition, 0, StepInfo(), PushKind::kInitialValues, 50});
  initial.Write({slice, gradient.data()}, *initial.Open());
  PushCalls pull_after(
      {&shard, &partition, 0, TestStep(), PushKind::kStepPullAfter, 50});
  pull_after.Write({slice, gradient.data()}, *pull_after.Open());
  const std::vector<FakeCall> calls = shard.calls();
  EXPECT_TRUE(calls[0].messages.at(0).initial_values());
  EXPECT_EQ(calls[0].messages.at(0).max_pull_chunk_elements(), 0u);
  EXPECT_FALSE(calls[1].messages.at(0).initial_values());
  EXPECT_EQ(calls[1].messages.at(0).max_pull_chunk_elements(), 50u);
}

TEST(PushCallsTest, APushEndsWithTheShardsAcknowledgement) {
  const Partition partition = TestPartition();
  FakeShard shard(0);
  PushCalls calls({&shard, &partition, 0, TestStep(), PushKind::kStep, 7});
  std::unique_ptr<ClientStream> call = calls.Open();
  EXPECT_TRUE(calls.Complete(*call, /*broken=*/false, nullptr).ok());
  EXPECT_TRUE(shard.calls()[0].writes_done);
  EXPECT_TRUE(shard.calls()[0].finished);

  // No answer, yet OK: the shard broke the contract.
  shard.Script({grpc::Status::OK, {}});
  call = calls.Open();
  EXPECT_EQ(calls.Complete(*call, false, nullptr).code(),
            absl::StatusCode::kInternal);

  // A broken stream: the call's status says why.
  shard.Script({grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone"), {}});
  call = calls.Open();
  EXPECT_EQ(calls.Complete(*call, /*broken=*/true, nullptr),
            absl::UnavailableError("gone"));
  EXPECT_FALSE(shard.calls()[2].writes_done);
}

TEST(PushCallsTest, APullAfterEndsWithTheShardsWeights) {
  const Partition partition = TestPartition();
  FakeShard shard(1);
  shard.Script({grpc::Status::OK, PullAnswer(partition, 1, 42, 11)});
  PushCalls calls(
      {&shard, &partition, 1, TestStep(), PushKind::kStepPullAfter, 11});
  TensorValues weights;
  ShapeWeights(partition.model(), weights);
  std::unique_ptr<ClientStream> call = calls.Open();
  ASSERT_TRUE(calls.Complete(*call, false, &weights).ok());
  EXPECT_EQ(calls.pulled_version(), 42u);
  EXPECT_TRUE(shard.calls()[0].writes_done);
  for (const Slice& slice : partition.SlicesOfServer(1)) {
    for (uint64_t e = slice.offset; e < slice.offset + slice.num_elements;
         ++e) {
      ASSERT_EQ(weights[slice.tensor_id][e], FakeWeight(slice.tensor_id, e));
    }
  }
}

TEST(PushCallsTest, RunsAttemptsUnderTheShardsRetryNamingWhatFailed) {
  const Partition partition = TestPartition();
  FakeShard shard(0);
  int attempts = 0;
  for (PushKind kind :
       {PushKind::kStep, PushKind::kStepPullAfter, PushKind::kInitialValues}) {
    PushCalls calls({&shard, &partition, 0, TestStep(), kind, 7});
    EXPECT_TRUE(calls
                    .RunWithRetry([&] {
                      return ++attempts % 2 == 1
                                 ? absl::UnavailableError("restarting")
                                 : absl::OkStatus();
                    })
                    .ok());
  }
  EXPECT_EQ(attempts, 6);
  EXPECT_THAT(shard.attempts(),
              ElementsAre("push", "push", "push and pull", "push and pull",
                          "initial values", "initial values"));
}

}  // namespace
}  // namespace ps::client_internal
