// ParameterService's Push: staged whole, refused whole, replays, and rank
// 0's initial values.
#include <limits>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/temp_dir_testing.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"
#include "server/parameter_service_testing.h"
#include "update/update_log.h"
#include "update/update_log_record.h"

namespace ps::server::testing {
namespace {

// A model whose "embedding" comes from rank 0, not from an initializer.
ModelSpec ModelWithValuesFromRank0() {
  ModelSpec m = MlpModelSpec({20, 30, 5}, kSeed);
  m.tensors.push_back(
      {"embedding/table", DType::kFloat32, {40}, InitializerSpec::FromRank0()});
  return m;
}

TEST_F(ParameterServiceTest, SyncPushesFromAllRanksUpdateTheWeights) {
  Start(ConsistencyMode::kSync);
  uint64_t version = 0;
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  EXPECT_EQ(version, 0u);
  ASSERT_TRUE(Push(ValidPush(1, 0, 3.0f), &version).ok());
  EXPECT_EQ(version, 1u);
  Weights weights;
  ASSERT_TRUE(Pull(1, 0, &weights, &version).ok());
  EXPECT_EQ(version, 1u);
  Weights expected = InitialWeights();
  ASSERT_EQ(weights.size(), expected.size());
  for (auto& [key, w] : expected) {
    EXPECT_FLOAT_EQ(weights[key], w - 2.0f);  // lr 1 * mean(1, 3)
  }
}

// With an update log a sync push is in no log until its step is, as the
// step's mean: its Push answers once the step was applied and logged (with
// the version after it), so that an acknowledged push outlives a kill.
TEST_F(ParameterServiceTest, SyncPushWithALogIsAcknowledgedWithItsStep) {
  update_log_dir_ = ps::testing::FreshTestDir("service_sync_log");
  Start(ConsistencyMode::kSync);
  ASSERT_TRUE(coordinator_->StartFreshLog().ok());
  ASSERT_TRUE(coordinator_->SnapshotForCheckpoint().ok());
  uint64_t first_version = 0;
  grpc::Status first;
  std::thread rank0(
      [&] { first = Push(ValidPush(0, 0, 1.0f), &first_version); });
  uint64_t version = 0;
  ASSERT_TRUE(Push(ValidPush(1, 0, 3.0f), &version).ok());
  rank0.join();
  ASSERT_TRUE(first.ok()) << first.error_message();
  EXPECT_EQ(first_version, 1u);  // Not 0: the step was applied first.
  EXPECT_EQ(version, 1u);
  absl::StatusOr<update::UpdateLogContents> log = update::ReadUpdateLog(
      update_log_dir_ + "/" + update::UpdateLogFileName(kServer, 0), kServer);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->records.size(), 1u);  // The step's mean, no push.
  absl::StatusOr<update::LogRecord> step =
      update::DecodeLogRecord(log->records[0]);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_TRUE(std::holds_alternative<update::LoggedStepMean>(*step));
  EXPECT_EQ(std::get<update::LoggedStepMean>(*step).parts.size(), 2u);
  Weights weights;
  ASSERT_TRUE(Pull(1, 0, &weights, &version).ok());
  for (const auto& [key, w] : InitialWeights()) {
    EXPECT_FLOAT_EQ(weights[key], w - 2.0f);  // lr 1 * mean(1, 3)
  }
}

TEST_F(ParameterServiceTest, MalformedPushesAreRefusedAndApplyNothing) {
  Start(ConsistencyMode::kAsync);
  const Slice other = partition_->SlicesOfServer(0).front();
  struct Case {
    std::function<void(std::vector<proto::PushRequest>&)> mutate;
    const char* text;
  };
  const Case cases[] = {
      // A chunk of the other server's slice, last in the stream: every
      // earlier chunk was fine and must not have been applied either.
      {[&](std::vector<proto::PushRequest>& p) {
         proto::TensorChunk* c = p.back().mutable_chunk();
         c->set_tensor_id(other.tensor_id);
         c->clear_shape();
         for (int64_t d : partition_->model().tensors[other.tensor_id].shape) {
           c->add_shape(d);
         }
         c->set_offset(other.offset);
       },
       "is outside this server's slices"},
      {[](std::vector<proto::PushRequest>& p) { p.pop_back(); },
       "push is incomplete"},
      {[](std::vector<proto::PushRequest>& p) { p.push_back(p.front()); },
       "overlaps elements already sent"},
      {[](std::vector<proto::PushRequest>& p) {
         p.back().mutable_chunk()->mutable_data()->append("xyz");
       },
       "bytes, expected"},
      {[](std::vector<proto::PushRequest>& p) { p.back().set_step(9); },
       "step changed within the push stream from 0 to 9"},
      {[](std::vector<proto::PushRequest>& p) {
         p.back().mutable_chunk()->set_dtype(proto::DTYPE_UNSPECIFIED);
       },
       "only DTYPE_FLOAT32"},
      {[](std::vector<proto::PushRequest>& p) { p.clear(); }, "no messages"},
  };
  for (const Case& c : cases) {
    std::vector<proto::PushRequest> push = ValidPush(0, 0, 1.0f);
    c.mutate(push);
    uint64_t version = 0;
    grpc::Status s = Push(push, &version);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.text;
    EXPECT_NE(s.error_message().find("push refused"), std::string::npos);
    EXPECT_NE(s.error_message().find(c.text), std::string::npos)
        << s.error_message();
    Weights weights;
    ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
    EXPECT_EQ(version, 0u);
    EXPECT_EQ(weights, InitialWeights()) << "a refused push changed weights";
  }
  // The same push, well formed, is applied at once in async mode.
  uint64_t version = 0;
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  EXPECT_EQ(version, 1u);
  const proto::StatsResponse stats = Stats();
  EXPECT_EQ(stats.version(), 1u);
  EXPECT_NE(stats.report().find("pushes: 1 ok, 7 refused"), std::string::npos)
      << stats.report();
  EXPECT_NE(stats.report().find("staleness (updates: 1"), std::string::npos)
      << stats.report();
}

TEST_F(ParameterServiceTest, SyncRefusesANonFinitePushWholeAndTakesAGoodOne) {
  Start(ConsistencyMode::kSync);
  uint64_t version = 0;
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    // One element of the last chunk: every earlier one was fine.
    std::vector<proto::PushRequest> push = ValidPush(1, 0, 3.0f);
    proto::TensorChunk* chunk = push.back().mutable_chunk();
    std::vector<float> values(chunk->num_elements(), 3.0f);
    values.back() = bad;
    EncodeFloats(values, chunk->mutable_data());
    grpc::Status s = Push(push, &version);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(
        s.error_message().find(absl::StrCat(
            "push refused: push message ", push.size() - 1, ": gradient of ",
            partition_->model().tensors[chunk->tensor_id()].name, " (tensor ",
            chunk->tensor_id(), ") element ",
            chunk->offset() + chunk->num_elements() - 1, " is ", bad)),
        std::string::npos)
        << s.error_message();
  }
  Weights weights;
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  EXPECT_EQ(version, 0u);
  EXPECT_EQ(weights, InitialWeights()) << "a refused push changed weights";
  // The step waited for rank 1, and takes its good push.
  ASSERT_TRUE(Push(ValidPush(1, 0, 3.0f), &version).ok());
  EXPECT_EQ(version, 1u);
  ASSERT_TRUE(Pull(1, 0, &weights, &version).ok());
  for (const auto& [key, w] : InitialWeights()) {
    EXPECT_FLOAT_EQ(weights[key], w - 2.0f);  // lr 1 * mean(1, 3)
  }
  EXPECT_NE(Stats().report().find("pushes: 2 ok, 2 refused"), std::string::npos)
      << Stats().report();
}

TEST_F(ParameterServiceTest, SyncRefusesAStaleStepWithAborted) {
  Start(ConsistencyMode::kSync);
  uint64_t version = 0;
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  ASSERT_TRUE(Push(ValidPush(1, 0, 1.0f), &version).ok());
  // Another batch for the step that completed.
  grpc::Status s = Push(ValidPush(1, 0, 1.0f, /*batch=*/1), &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_NE(s.error_message().find("stale step 0"), std::string::npos);
}

TEST_F(ParameterServiceTest, AReplayedPushIsAcknowledgedAndNotApplied) {
  Start(ConsistencyMode::kAsync);
  uint64_t version = 0;
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  EXPECT_EQ(version, 1u);
  // The same batch again (a worker resuming from another shard's progress).
  ASSERT_TRUE(Push(ValidPush(0, 0, 1.0f), &version).ok());
  EXPECT_EQ(version, 1u);
  Weights weights;
  ASSERT_TRUE(Pull(1, 0, &weights, &version).ok());
  for (auto& [key, w] : InitialWeights()) EXPECT_FLOAT_EQ(weights[key], w - 1);
  const proto::StatsResponse stats = Stats();
  EXPECT_NE(stats.report().find("examples per epoch: 0=8\n"), std::string::npos)
      << stats.report();
  EXPECT_NE(stats.report().find("replayed pushes acknowledged, not applied: 1"),
            std::string::npos)
      << stats.report();
}

TEST_F(ParameterServiceTest, Rank0sInitialValuesAreWhatEveryRankPulls) {
  model_ = ModelWithValuesFromRank0();
  declare_at_start_ = false;
  Start(ConsistencyMode::kSync);
  ASSERT_TRUE(Declare(0, model_).ok());
  const std::vector<Slice>& slices = partition_->SlicesOfServer(kServer);
  ASSERT_TRUE(std::any_of(slices.begin(), slices.end(), [](const Slice& s) {
    return s.tensor_id == 4;
  })) << "the test needs this shard to hold part of the embedding";
  // Until the values are in, rank 1 waits and rank 0 cannot pull.
  grpc::Status s = Declare(1, model_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find(
                "rank 0 has not sent the values of embedding/table yet"),
            std::string::npos)
      << s.error_message();
  Weights weights;
  uint64_t version = 0;
  s = Pull(0, 0, &weights, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // A gradient is refused meanwhile too.
  EXPECT_EQ(Push(ValidPush(0, 0, 1.0f), &version).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  // Initial values: only the embedding's elements, from rank 0, finite.
  auto values = [&](int rank, float first) {
    std::vector<proto::PushRequest> messages;
    for (const Slice& slice : slices) {
      if (slice.tensor_id != 4) continue;
      proto::PushRequest m;
      *m.mutable_header() = Header(rank);
      m.set_initial_values(true);
      proto::TensorChunk* c = m.mutable_chunk();
      c->set_tensor_id(4);
      c->set_dtype(proto::DTYPE_FLOAT32);
      c->add_shape(40);
      c->set_offset(slice.offset);
      c->set_num_elements(slice.num_elements);
      std::vector<float> v(slice.num_elements);
      for (size_t i = 0; i < v.size(); ++i) v[i] = first + 0.125f * i;
      EncodeFloats(v, c->mutable_data());
      messages.push_back(std::move(m));
    }
    return messages;
  };
  s = Push(values(1, 3.0f), &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("initial values come from rank 0"),
            std::string::npos)
      << s.error_message();
  std::vector<proto::PushRequest> with_nan = values(0, 3.0f);
  with_nan[0].mutable_chunk()->mutable_data()->replace(0, 4, "\0\0\xc0\x7f", 4);
  s = Push(with_nan, &version);
  EXPECT_NE(s.error_message().find("initial values must be finite"),
            std::string::npos)
      << s.error_message();
  std::vector<proto::PushRequest> gradient_too = values(0, 3.0f);
  for (proto::PushRequest m : ValidPush(0, 0, 1.0f)) {
    m.set_step(0);
    m.set_num_examples(0);
    m.set_examples_done(0);
    m.set_base_version(0);
    m.set_initial_values(true);
    if (m.chunk().tensor_id() != 4) gradient_too.push_back(m);
  }
  s = Push(gradient_too, &version);
  EXPECT_NE(s.error_message().find("taken only for tensors declared "
                                   "from_rank0"),
            std::string::npos)
      << s.error_message();

  ASSERT_TRUE(Push(values(0, 3.0f), &version).ok());
  // A restarted rank 0 sending other values changes nothing.
  ASSERT_TRUE(Push(values(0, -8.0f), &version).ok());
  ASSERT_TRUE(Declare(1, model_).ok());
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  for (const Slice& slice : slices) {
    if (slice.tensor_id != 4) continue;
    for (uint64_t i = 0; i < slice.num_elements; ++i) {
      EXPECT_EQ((weights[{4, slice.offset + i}]), 3.0f + 0.125f * i);
    }
  }
}

}  // namespace
}  // namespace ps::server::testing
