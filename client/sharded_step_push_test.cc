#include "client/sharded_step_push.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::client_internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// What the fake streams were told, in order, by every shard: "open 0",
// "enqueue 0 t1@4", "close 0", "join 0", "drop 0".
struct Log {
  std::vector<std::string> events;
  std::vector<absl::Status> join_status;
  std::vector<uint64_t> versions;
  std::vector<TensorValues*> weights;
  // Every enqueued item.
  std::vector<PushItem> items;
};

class FakeStream final : public PushStream {
 public:
  FakeStream(Log* log, int server) : log_(log), server_(server) {}
  ~FakeStream() override { Say("drop"); }
  void Enqueue(const PushItem& item) override {
    log_->items.push_back(item);
    Say(absl::StrCat("enqueue t", item.slice.tensor_id, "@",
                     item.slice.offset));
  }
  void Close(TensorValues* weights) override {
    log_->weights[server_] = weights;
    Say("close");
  }
  absl::Status Join() override {
    Say("join");
    return log_->join_status[server_];
  }
  uint64_t pulled_version() const override { return log_->versions[server_]; }

 private:
  void Say(const std::string& what) {
    log_->events.push_back(absl::StrCat(what, " ", server_));
  }
  Log* const log_;
  const int server_;
};

class ShardedStepPushTest : public ::testing::Test {
 protected:
  static constexpr int kTensors = 4;

  // "emb" and "scale" come from rank 0; "emb" is split over the shards.
  ShardedStepPushTest() {
    ModelSpec model;
    model.tensors.push_back(
        {"emb", DType::kFloat32, {400}, InitializerSpec::FromRank0()});
    model.tensors.push_back(
        {"scale", DType::kFloat32, {}, InitializerSpec::FromRank0()});
    model.tensors.push_back(
        {"dense.w", DType::kFloat32, {300}, InitializerSpec::Zeros()});
    model.tensors.push_back(
        {"dense.b", DType::kFloat32, {3, 5, 7}, InitializerSpec::Zeros()});
    partition_ = std::make_unique<Partition>(*Partition::Create(model, 3));
    log_.join_status.resize(3);
    log_.versions = {9, 7, 8};
    log_.weights.resize(3);
    gradients_.resize(kTensors);
    for (size_t t = 0; t < kTensors; ++t) {
      gradients_[t].resize(model.tensors[t].num_elements(), 1.0f);
    }
  }

  std::unique_ptr<ShardedStepPush> Start(PushKind kind) {
    return std::make_unique<ShardedStepPush>(
        partition_.get(), kind, /*step=*/6,
        [this](int s) -> std::unique_ptr<PushStream> {
          log_.events.push_back(absl::StrCat("open ", s));
          return std::make_unique<FakeStream>(&log_, s);
        },
        [this](uint64_t clock) { pulled_clocks_.push_back(clock); });
  }

  // The events of `kind` ("close", ...), in order, without the shard.
  std::vector<std::string> Events(absl::string_view kind) const {
    std::vector<std::string> out;
    for (const std::string& e : log_.events) {
      if (absl::StartsWith(e, kind)) out.push_back(e);
    }
    return out;
  }

  std::unique_ptr<Partition> partition_;
  Log log_;
  TensorValues gradients_;
  std::vector<uint64_t> pulled_clocks_;
};

TEST_F(ShardedStepPushTest, SendsEachSliceToTheShardHoldingIt) {
  std::unique_ptr<ShardedStepPush> push = Start(PushKind::kStep);
  EXPECT_THAT(Events("open"), ElementsAre("open 0", "open 1", "open 2"));
  ASSERT_TRUE(push->Send(0, gradients_[0]).ok());
  std::vector<std::string> expected;
  for (const Slice& slice : partition_->SlicesOfTensor(0)) {
    expected.push_back(
        absl::StrCat("enqueue t0@", slice.offset, " ", slice.server));
  }
  ASSERT_GT(expected.size(), 1u);  // What this test is about.
  EXPECT_EQ(Events("enqueue"), expected);
}

TEST_F(ShardedStepPushTest, ClosesEveryStreamBeforeJoiningAny) {
  std::unique_ptr<ShardedStepPush> push = Start(PushKind::kStep);
  for (int id = kTensors - 1; id >= 0; --id)
    ASSERT_TRUE(push->Send(id, gradients_[id]).ok());
  log_.join_status[0] = absl::AbortedError("refused");
  EXPECT_EQ(push->Finish(), absl::AbortedError("refused"));
  std::vector<std::string> ends;
  for (const std::string& e : log_.events) {
    if (absl::StartsWith(e, "close") || absl::StartsWith(e, "join")) {
      ends.push_back(e);
    }
  }
  EXPECT_THAT(ends, ElementsAre("close 0", "close 1", "close 2", "join 0",
                                "join 1", "join 2"));
  EXPECT_THAT(log_.weights, ElementsAre(nullptr, nullptr, nullptr));
  EXPECT_THAT(pulled_clocks_, IsEmpty());
}

TEST_F(ShardedStepPushTest, FinishWithPullShapesTheWeightsAndTakesTheOldest) {
  std::unique_ptr<ShardedStepPush> push = Start(PushKind::kStepPullAfter);
  for (int id = 0; id < kTensors; ++id)
    ASSERT_TRUE(push->Send(id, gradients_[id]).ok());
  TensorValues weights;
  absl::StatusOr<uint64_t> version = push->FinishWithPull(weights);
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 7u);
  ASSERT_EQ(weights.size(), 4u);
  EXPECT_EQ(weights[0].size(), 400u);
  EXPECT_EQ(weights[1].size(), 1u);
  EXPECT_THAT(log_.weights, ElementsAre(&weights, &weights, &weights));
  EXPECT_THAT(pulled_clocks_, ElementsAre(7));
}

TEST_F(ShardedStepPushTest, AFailedPullAfterDoesNotMoveTheClock) {
  std::unique_ptr<ShardedStepPush> push = Start(PushKind::kStepPullAfter);
  for (int id = 0; id < kTensors; ++id)
    ASSERT_TRUE(push->Send(id, gradients_[id]).ok());
  log_.join_status[2] = absl::DataLossError("bad chunk");
  TensorValues weights;
  EXPECT_EQ(push->FinishWithPull(weights).status(),
            absl::DataLossError("bad chunk"));
  EXPECT_THAT(pulled_clocks_, IsEmpty());
}

TEST_F(ShardedStepPushTest, RefusesBadSendsNamingTheTensorAndSendingNothing) {
  std::unique_ptr<ShardedStepPush> push = Start(PushKind::kStep);
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(push->Send(-1, gradients_[0]).code(), kInvalid);
  EXPECT_EQ(push->Send(kTensors, gradients_[0]).code(), kInvalid);
  const absl::Status wrong_size = push->Send(1, gradients_[0]);
  EXPECT_EQ(wrong_size.code(), kInvalid);
  EXPECT_THAT(std::string(wrong_size.message()), HasSubstr("scale"));
  EXPECT_THAT(Events("enqueue"), IsEmpty());
  ASSERT_TRUE(push->Send(1, gradients_[1]).ok());
  const absl::Status twice = push->Send(1, gradients_[1]);
  EXPECT_EQ(twice.code(), kInvalid);
  EXPECT_THAT(std::string(twice.message()), HasSubstr("\"scale\" sent twice"));
  EXPECT_EQ(Events("enqueue").size(), 1u);
}

TEST_F(ShardedStepPushTest, EndingTheWrongWayChangesNothing) {
  std::unique_ptr<ShardedStepPush> push = Start(PushKind::kStep);
  TensorValues weights;
  EXPECT_EQ(push->FinishWithPull(weights).status().code(),
            absl::StatusCode::kFailedPrecondition);
  for (int id = 0; id < kTensors; ++id)
    ASSERT_TRUE(push->Send(id, gradients_[id]).ok());
  EXPECT_TRUE(push->Finish().ok());
  EXPECT_EQ(push->Finish().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(push->Send(0, gradients_[0]).code(),
            absl::StatusCode::kFailedPrecondition);

  std::unique_ptr<ShardedStepPush> pull_after = Start(PushKind::kStepPullAfter);
  EXPECT_EQ(pull_after->Finish().code(), absl::StatusCode::kFailedPrecondition);
  for (int id = 0; id < kTensors; ++id) {
    ASSERT_TRUE(pull_after->Send(id, gradients_[id]).ok());
  }
  EXPECT_TRUE(pull_after->FinishWithPull(weights).ok());
}

TEST_F(ShardedStepPushTest, AStepWithATensorMissingIsCancelledNotSent) {
  std::unique_ptr<ShardedStepPush> push = Start(PushKind::kStep);
  for (int id : {0, 2, 3}) ASSERT_TRUE(push->Send(id, gradients_[id]).ok());
  const absl::Status status = push->Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tensor 1 \"scale\" was not sent"));
  // Dropped unclosed: each stream cancels its call.
  EXPECT_THAT(Events("close"), IsEmpty());
  EXPECT_THAT(Events("join"), IsEmpty());
  EXPECT_THAT(Events("drop"), ElementsAre("drop 0", "drop 1", "drop 2"));
}

TEST_F(ShardedStepPushTest, InitialValuesGoOnlyToTheShardsHoldingThem) {
  std::vector<bool> holds(3, false);
  for (uint32_t t : {0u, 1u}) {
    for (const Slice& slice : partition_->SlicesOfTensor(t)) {
      holds[slice.server] = true;
    }
  }
  std::vector<std::string> expected;
  for (int s = 0; s < 3; ++s) {
    if (holds[s]) expected.push_back(absl::StrCat("open ", s));
  }
  ASSERT_LT(expected.size(), 3u);  // What this test is about.
  std::unique_ptr<ShardedStepPush> push = Start(PushKind::kInitialValues);
  EXPECT_EQ(Events("open"), expected);
  const absl::Status not_from_rank0 = push->Send(2, gradients_[2]);
  EXPECT_EQ(not_from_rank0.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(not_from_rank0.message()),
              HasSubstr("dense.w, which is not declared FromRank0"));
  ASSERT_TRUE(push->Send(0, gradients_[0]).ok());
  ASSERT_TRUE(push->Send(1, gradients_[1]).ok());
  EXPECT_TRUE(push->Finish().ok());  // Complete without dense.w and dense.b.
  EXPECT_EQ(Events("join").size(), expected.size());
}

// dense.w (id 2) in top-k, dense.b (id 3) in bfloat16: each slice goes
// out in its tensor's encoding, top-k's from the sparsified values; the
// residual is kept only once every shard took the push.
TEST_F(ShardedStepPushTest, CompressesAsChosenAndCommitsTheResidualOnSuccess) {
  TensorCompression compression(&partition_->model(), {});
  ASSERT_TRUE(compression.Set(2, {Compression::Kind::kTopK, 0.01}).ok());
  ASSERT_TRUE(compression.Set(3, {Compression::Kind::kBfloat16}).ok());
  // k = 3 of 300: 7, 8 and 9 are sent, 10 is left for the next push.
  std::vector<float> gradient(300, 0.0f);
  gradient[7] = 5.0f;
  gradient[8] = 4.0f;
  gradient[9] = 3.0f;
  gradient[10] = 2.0f;
  auto step = [&](absl::Status join) {
    log_.items.clear();
    log_.join_status = {join, join, join};
    ShardedStepPush push(
        partition_.get(), PushKind::kStep, 6,
        [this](int s) { return std::make_unique<FakeStream>(&log_, s); },
        [](uint64_t) {}, &compression, compression.Choices());
    for (int t = 0; t < kTensors; ++t) {
      EXPECT_TRUE(push.Send(t, t == 2 ? gradient : gradients_[t]).ok());
    }
    for (const PushItem& item : log_.items) {
      const WireEncoding expected =
          item.slice.tensor_id == 2   ? WireEncoding::kTopK
          : item.slice.tensor_id == 3 ? WireEncoding::kBfloat16
                                      : WireEncoding::kFloat32;
      EXPECT_EQ(item.encoding, expected) << item.slice.tensor_id;
    }
    return push.Finish();
  };
  // What the next push would send from a zero gradient: the residual.
  auto residual_sent = [&] {
    std::vector<float> left;
    return compression.Sparsify(2, std::vector<float>(300, 0.0f), 0.01,
                                &left)[10];
  };
  EXPECT_FALSE(step(absl::UnavailableError("down")).ok());
  EXPECT_EQ(residual_sent(), 0.0f) << "a failed push changed the residual";
  ASSERT_TRUE(step(absl::OkStatus()).ok());
  EXPECT_EQ(residual_sent(), 2.0f) << "the taken push's residual was lost";
}

}  // namespace
}  // namespace ps::client_internal
