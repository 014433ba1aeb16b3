// ParameterClient's optimizer state calls against two real shards built as
// the server builds them (ShardBuilder, ServerTransports), in-process:
// tensors split across the shards are gathered and written whole.

#include "client/optimizer_state_calls.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/parameter_client.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_config.h"
#include "server/server_config_testing.h"
#include "server/server_transports.h"
#include "server/shard_builder.h"
#include "server/shard_host.h"
#include "update/shard_store.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr int kServers = 2;
constexpr float kBeta1 = 0.9f;
constexpr float kBeta2 = 0.999f;

// "w" (10 elements) is split across both shards; "b" is whole on one.
ModelSpec Model() {
  ModelSpec model;
  TensorSpec w;
  w.name = "w";
  w.shape = {2, 5};
  TensorSpec b;
  b.name = "b";
  b.shape = {2};
  model.tensors = {w, b};
  model.optimizer = OptimizerSpec::Adam(0.1f, kBeta1, kBeta2);
  return model;
}

// Gradient of step `step` for element e of tensor t.
float Gradient(int step, int t, int e) {
  return 0.5f * static_cast<float>(step + 1) - 0.25f * static_cast<float>(e) +
         static_cast<float>(t);
}

// One shard served in-process; with `durable`, it checkpoints (when asked)
// into `checkpoint_dir` and logs every update into `log_dir`, and starts
// from the newest checkpoint there.
struct Shard {
  explicit Shard(int index, bool durable = false,
                 const std::string& checkpoint_dir = "",
                 const std::string& log_dir = "")
      : config(server::testing::TestServerConfig(2)) {
    config.server_index = index;
    config.num_servers = kServers;
    config.coordinator.mode = ConsistencyMode::kAsync;
    config.local_transport = false;
    if (durable) {
      server::CheckpointPolicy policy;  // Written when asked only.
      policy.dir = checkpoint_dir;
      policy.every_updates = 0;
      policy.every = absl::ZeroDuration();
      config.checkpoints = policy;
      config.coordinator.update_log_dir = log_dir;
      config.restore = server::RestoreMode::kRestore;
    }
    builder = std::make_unique<server::ShardBuilder>(config, nullptr);
    host = std::make_unique<server::ShardHost>(builder->ForDeclarations(),
                                               DeclarationLimits());
    transports =
        std::make_unique<server::ServerTransports>(config, host.get(), nullptr);
  }
  ~Shard() { transports->Shutdown(absl::Now()); }

  server::ServerConfig config;
  std::unique_ptr<server::ShardBuilder> builder;
  std::unique_ptr<server::ShardHost> host;
  std::unique_ptr<server::ServerTransports> transports;
};

class OptimizerStateCallsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(false); }

  // The shards (durable ones in fresh directories) and a client per rank.
  void Start(bool durable) {
    std::vector<std::string> addresses;
    for (int s = 0; s < kServers; ++s) {
      shards_.push_back(
          std::make_unique<Shard>(s, durable, server::testing::FreshTestDir(),
                                  server::testing::FreshTestDir()));
      ASSERT_TRUE(shards_.back()->transports->Listen().ok());
      addresses.push_back(
          absl::StrCat("127.0.0.1:", shards_.back()->transports->port()));
    }
    for (int rank = 0; rank < 2; ++rank) {
      ClientOptions options;
      options.servers = addresses;
      options.rank = rank;
      options.heartbeat_period = absl::ZeroDuration();
      options.retry_timeout = absl::Seconds(5);
      absl::StatusOr<std::unique_ptr<ParameterClient>> client =
          ParameterClient::Connect(options);
      ASSERT_TRUE(client.ok()) << client.status();
      clients_.push_back(*std::move(client));
    }
  }

  void TearDown() override {
    clients_.clear();
    for (auto& shard : shards_) {
      if (server::DeclaredShard* declared = shard->host->get()) {
        declared->coordinator->Shutdown();
      }
    }
    shards_.clear();
  }

  // Every slice's optimizer state on shard `s`, as it holds it.
  static std::vector<update::SliceSnapshot> Held(Shard& shard) {
    std::vector<update::SliceSnapshot> slices;
    const update::ShardStore& store = *shard.host->get()->store;
    for (int i = 0; i < store.num_slices(); ++i) {
      slices.push_back(store.SnapshotOptimizerState(i));
    }
    return slices;
  }

  void Declare() {
    for (auto& client : clients_) {
      absl::StatusOr<Registration> r = client->Declare(Model(), 10);
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }

  // Rank 0's steps [first, end), applied as they come (async).
  void Train(int end, int first = 0) {
    for (int step = first; step < end; ++step) {
      TensorValues gradients(2);
      for (int t = 0; t < 2; ++t) {
        const int64_t size = Model().tensors[t].num_elements();
        for (int e = 0; e < size; ++e) {
          gradients[t].push_back(Gradient(step, t, e));
        }
      }
      StepInfo info;
      info.step = step;
      info.base_version = step;
      info.num_examples = 8;
      info.cursor.examples_done = 8 * (step + 1);
      ASSERT_TRUE(clients_[0]->Push(info, gradients).ok());
    }
  }

  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::unique_ptr<ParameterClient>> clients_;
};

TEST_F(OptimizerStateCallsTest, ReadGathersTensorsSplitAcrossTheShards) {
  Declare();
  Train(2);
  absl::StatusOr<OptimizerState> state = clients_[1]->ReadOptimizerState();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->kind, OptimizerKind::kAdam);
  EXPECT_EQ(state->version, 2u);
  ASSERT_EQ(state->tensors.size(), 2u);
  for (int t = 0; t < 2; ++t) {
    const TensorOptimizerState& tensor = state->tensors[t];
    EXPECT_EQ(tensor.update_count, 2u);
    ASSERT_EQ(tensor.vectors.size(), 2u);
    EXPECT_EQ(tensor.vectors[0].first, "m");
    EXPECT_EQ(tensor.vectors[1].first, "v");
    for (size_t e = 0; e < tensor.vectors[0].second.size(); ++e) {
      // Adam's moments after two updates, in the shards' float arithmetic.
      float m = 0, v = 0;
      for (int step = 0; step < 2; ++step) {
        const float g = Gradient(step, t, static_cast<int>(e));
        m = kBeta1 * m + (1.0f - kBeta1) * g;
        v = kBeta2 * v + (1.0f - kBeta2) * g * g;
      }
      EXPECT_FLOAT_EQ(tensor.vectors[0].second[e], m) << t << " " << e;
      EXPECT_FLOAT_EQ(tensor.vectors[1].second[e], v) << t << " " << e;
    }
  }
}

TEST_F(OptimizerStateCallsTest, AWrittenStateReadsBackAndKeepsTheWeights) {
  Declare();
  Train(1);
  TensorValues before;
  ASSERT_TRUE(clients_[0]->Pull(1, before).ok());
  OptimizerState state = *clients_[0]->ReadOptimizerState();
  for (TensorOptimizerState& tensor : state.tensors) {
    tensor.update_count = 40;
    for (auto& [name, values] : tensor.vectors) {
      for (size_t e = 0; e < values.size(); ++e) values[e] = 0.125f * e + 1;
    }
  }
  ASSERT_TRUE(clients_[0]->WriteOptimizerState(state, 1).ok());
  absl::StatusOr<OptimizerState> again = clients_[1]->ReadOptimizerState();
  ASSERT_TRUE(again.ok()) << again.status();
  for (size_t t = 0; t < state.tensors.size(); ++t) {
    EXPECT_EQ(again->tensors[t].update_count, 40u);
    EXPECT_EQ(again->tensors[t].vectors, state.tensors[t].vectors);
  }
  TensorValues after;
  ASSERT_TRUE(clients_[0]->Pull(1, after).ok());
  EXPECT_EQ(after, before);
}

TEST_F(OptimizerStateCallsTest, RefusesWritesThatCannotApply) {
  Declare();
  Train(1);
  OptimizerState state = *clients_[0]->ReadOptimizerState();
  const OptimizerState read = state;
  absl::Status s = clients_[1]->WriteOptimizerState(state);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("only rank 0"));
  s = clients_[0]->WriteOptimizerState(state, /*at_version=*/0);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(s.message(), HasSubstr("server 0 ("));
  EXPECT_THAT(s.message(), HasSubstr("this shard is at version 1"));
  state.kind = OptimizerKind::kSgd;
  s = clients_[0]->WriteOptimizerState(state);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("this shard runs adam"));
  state = read;
  state.tensors[1].vectors[0].second.pop_back();
  s = clients_[0]->WriteOptimizerState(state);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("b: m has 1 values, the tensor 2"));
  // Nothing of them was applied.
  absl::StatusOr<OptimizerState> again = clients_[1]->ReadOptimizerState();
  ASSERT_TRUE(again.ok());
  for (size_t t = 0; t < read.tensors.size(); ++t) {
    EXPECT_EQ(again->tensors[t].vectors, read.tensors[t].vectors);
  }
}

// A shard restarted from its newest checkpoint and update log has the
// written state, with the updates after it: the write's checkpoint is the
// one the log replays from.
TEST_F(OptimizerStateCallsTest, AWrittenStateSurvivesAShardRestart) {
  TearDown();
  Start(/*durable=*/true);
  Declare();
  Train(2);
  OptimizerState state = *clients_[0]->ReadOptimizerState();
  for (TensorOptimizerState& tensor : state.tensors) {
    tensor.update_count = 7;
    for (auto& [name, values] : tensor.vectors) {
      for (float& x : values) x = 4 * x + 0.5f;
    }
  }
  ASSERT_TRUE(clients_[0]->WriteOptimizerState(state).ok());
  Train(3, 2);  // Logged after the write's checkpoint.
  clients_.clear();
  for (int s = 0; s < kServers; ++s) {
    const std::vector<update::SliceSnapshot> before = Held(*shards_[s]);
    EXPECT_EQ(before[0].update_count, 8u);
    // The shard dies (no final checkpoint) and starts again.
    shards_[s]->host->get()->coordinator->Shutdown();
    const std::string checkpoint_dir = shards_[s]->config.checkpoints->dir;
    const std::string log_dir = shards_[s]->config.coordinator.update_log_dir;
    shards_[s] = std::make_unique<Shard>(s, true, checkpoint_dir, log_dir);
    absl::StatusOr<std::unique_ptr<server::DeclaredShard>> restarted =
        shards_[s]->builder->AtStart();
    ASSERT_TRUE(restarted.ok()) << restarted.status();
    ASSERT_NE(*restarted, nullptr);
    shards_[s]->host->Install(*std::move(restarted));
    const std::vector<update::SliceSnapshot> after = Held(*shards_[s]);
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_EQ(after[i].update_count, before[i].update_count);
      EXPECT_EQ(after[i].state, before[i].state) << "server " << s;
    }
  }
}

TEST_F(OptimizerStateCallsTest, NeedsADeclaration) {
  EXPECT_EQ(clients_[0]->ReadOptimizerState().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(clients_[0]->WriteOptimizerState(OptimizerState()).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps
