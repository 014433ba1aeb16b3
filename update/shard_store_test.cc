#include "update/shard_store.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/initializer.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "gtest/gtest.h"

namespace ps::update {
namespace {

OptimizerConfig PlainSgd(float lr) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.learning_rate = lr;
  c.momentum = 0.0f;
  return c;
}

Partition MakePartition(int num_servers, uint64_t seed = 7) {
  absl::StatusOr<Partition> p =
      Partition::Create(MlpModelSpec({20, 30, 5}, seed), num_servers);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

std::unique_ptr<ShardStore> MakeStore(const Partition& p, int index) {
  absl::StatusOr<std::unique_ptr<ShardStore>> s =
      ShardStore::Create(p, index, PlainSgd(0.5f));
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

TEST(ShardStoreTest, HoldsTheSlicesThePartitionAssigns) {
  Partition p = MakePartition(3);
  for (int server = 0; server < 3; ++server) {
    auto store = MakeStore(p, server);
    ASSERT_EQ(store->num_slices(),
              static_cast<int>(p.SlicesOfServer(server).size()));
    EXPECT_EQ(store->num_elements(), p.ElementsOnServer(server));
    for (int i = 0; i < store->num_slices(); ++i) {
      EXPECT_EQ(store->ReadSlice(i).size(), store->slices()[i].num_elements);
    }
  }
}

TEST(ShardStoreTest, WeightsDoNotDependOnServerCount) {
  Partition one = MakePartition(1);
  Partition three = MakePartition(3);
  auto whole = MakeStore(one, 0);
  std::vector<std::unique_ptr<ShardStore>> parts;
  for (int s = 0; s < 3; ++s) parts.push_back(MakeStore(three, s));
  // Reassemble every tensor from the three stores; compare with one store.
  for (int i = 0; i < whole->num_slices(); ++i) {
    const Slice& full = whole->slices()[i];
    std::vector<float> expected = whole->ReadSlice(i);
    std::vector<float> assembled(full.num_elements, -99.0f);
    for (const auto& part : parts) {
      for (int j = 0; j < part->num_slices(); ++j) {
        const Slice& s = part->slices()[j];
        if (s.tensor_id != full.tensor_id) continue;
        std::vector<float> w = part->ReadSlice(j);
        std::copy(w.begin(), w.end(), assembled.begin() + s.offset);
      }
    }
    EXPECT_EQ(assembled, expected) << "tensor " << full.tensor_id;
  }
}

TEST(ShardStoreTest, InitializesWithTheSharedInitializer) {
  Partition p = MakePartition(2, /*seed=*/42);
  auto store = MakeStore(p, 1);
  for (int i = 0; i < store->num_slices(); ++i) {
    const Slice& s = store->slices()[i];
    std::vector<float> expected(s.num_elements);
    InitializeSlice(p.model(), s.tensor_id, s.offset, absl::MakeSpan(expected));
    EXPECT_EQ(store->ReadSlice(i), expected);
  }
}

TEST(ShardStoreTest, ASharedVersionIsUntouchedByLaterUpdates) {
  Partition p = MakePartition(1);
  auto store = MakeStore(p, 0);
  const std::vector<float> before = store->ReadSlice(0);
  const VersionedWeights::Version pulled = store->ShareWeights(0);
  ASSERT_EQ(*pulled, before);
  ASSERT_TRUE(
      store->ApplyGradient(0, std::vector<float>(before.size(), 1.0f)).ok());
  EXPECT_EQ(*pulled, before) << "an update changed weights being sent";
  const std::vector<float> after = store->ReadSlice(0);
  EXPECT_NE(after, before);
  EXPECT_EQ(*store->ShareWeights(0), after);
}

TEST(ShardStoreTest, FindSliceAcceptsOnlyRangesInsideOneOwnedSlice) {
  Partition p = MakePartition(3);
  auto store = MakeStore(p, 1);
  ASSERT_GT(store->num_slices(), 0);
  for (int i = 0; i < store->num_slices(); ++i) {
    const Slice& s = store->slices()[i];
    EXPECT_EQ(store->FindSlice(s.tensor_id, s.offset, s.num_elements), i);
    EXPECT_EQ(store->FindSlice(s.tensor_id, s.offset + s.num_elements - 1, 1),
              i);
    EXPECT_EQ(store->FindSlice(s.tensor_id, s.offset, s.num_elements + 1), -1);
    EXPECT_EQ(store->FindSlice(s.tensor_id, s.offset, 0), -1);
    EXPECT_EQ(store->FindSlice(s.tensor_id, s.offset + 1, UINT64_MAX), -1);
    EXPECT_EQ(store->FindSlice(s.tensor_id, UINT64_MAX, 1), -1);
  }
  // Slices other servers hold are not found here.
  for (int other : {0, 2}) {
    for (const Slice& s : p.SlicesOfServer(other)) {
      EXPECT_EQ(store->FindSlice(s.tensor_id, s.offset, 1), -1);
    }
  }
  EXPECT_EQ(store->FindSlice(99, 0, 1), -1);
}

TEST(ShardStoreTest, ApplyGradientRunsTheSliceOptimizer) {
  Partition p = MakePartition(1);
  auto store = MakeStore(p, 0);
  std::vector<float> before = store->ReadSlice(1);
  std::vector<float> gradient(before.size(), 2.0f);
  ASSERT_TRUE(store->ApplyGradient(1, gradient).ok());
  std::vector<float> after = store->ReadSlice(1);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_FLOAT_EQ(after[i], before[i] - 1.0f);  // lr 0.5 * 2
  }
  EXPECT_EQ(store->ReadSlice(0), MakeStore(p, 0)->ReadSlice(0));
  EXPECT_FALSE(store->ApplyGradient(1, {1.0f}).ok());
  EXPECT_EQ(store->ReadSlice(1), after);
}

TEST(ShardStoreTest, ApplyGradientTakesTheUpdatesLearningRate) {
  Partition p = MakePartition(1);
  auto store = MakeStore(p, 0);
  std::vector<float> before = store->ReadSlice(0);
  std::vector<float> gradient(before.size(), 2.0f);
  ASSERT_TRUE(store->ApplyGradient(0, gradient, 0.125f).ok());
  std::vector<float> after = store->ReadSlice(0);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_FLOAT_EQ(after[i], before[i] - 0.25f);
  }
}

OptimizerConfig Adam() {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.learning_rate = 0.01f;
  return c;
}

TEST(ShardStoreTest, RestoreOfASnapshotContinuesBitIdentically) {
  Partition p = MakePartition(2);
  auto a = *ShardStore::Create(p, 1, Adam());
  auto step = [](ShardStore& store, float g) {
    for (int i = 0; i < store.num_slices(); ++i) {
      std::vector<float> gradient(store.slices()[i].num_elements, g);
      for (size_t k = 0; k < gradient.size(); ++k) gradient[k] += 0.01f * k;
      ASSERT_TRUE(store.ApplyGradient(i, gradient).ok());
    }
  };
  step(*a, 1.0f);
  step(*a, -0.5f);
  std::vector<SliceSnapshot> snapshot;
  for (int i = 0; i < a->num_slices(); ++i) snapshot.push_back(a->Snapshot(i));
  ASSERT_EQ(snapshot[0].state.size(), 2u);
  EXPECT_EQ(snapshot[0].state[0].first, "m");
  EXPECT_EQ(snapshot[0].update_count, 2u);

  auto b = *ShardStore::Create(MakePartition(2, /*seed=*/99), 1, Adam());
  ASSERT_TRUE(b->Restore(snapshot).ok());
  step(*a, 0.25f);
  step(*b, 0.25f);
  for (int i = 0; i < a->num_slices(); ++i) {
    const std::vector<float> wa = a->ReadSlice(i), wb = b->ReadSlice(i);
    ASSERT_EQ(0, std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)))
        << "slice " << i;
    EXPECT_EQ(b->Snapshot(i).update_count, 3u);
  }
}

TEST(ShardStoreTest, RestoreRefusesAMismatchWithoutChangingAnything) {
  Partition p = MakePartition(1);
  auto adam = *ShardStore::Create(p, 0, Adam());
  auto sgd = MakeStore(p, 0);
  std::vector<SliceSnapshot> from_sgd;
  for (int i = 0; i < sgd->num_slices(); ++i) {
    from_sgd.push_back(sgd->Snapshot(i));
    from_sgd.back().weights.assign(from_sgd.back().weights.size(), 42.0f);
  }
  const std::vector<float> before = adam->ReadSlice(0);
  absl::Status s = adam->Restore(from_sgd);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("optimizer state [] does not match"),
            std::string::npos)
      << s;
  EXPECT_EQ(adam->ReadSlice(0), before);

  std::vector<SliceSnapshot> short_weights = from_sgd;
  short_weights.back().weights.pop_back();
  EXPECT_NE(sgd->Restore(short_weights).message().find("weights, expected"),
            std::string::npos);
  from_sgd.pop_back();
  EXPECT_NE(sgd->Restore(from_sgd).message().find("slices"), std::string::npos);
  EXPECT_NE(sgd->ReadSlice(0)[0], 42.0f);
}

TEST(ShardStoreTest, RejectsServerIndexOutsideThePartition) {
  Partition p = MakePartition(2);
  for (int index : {-1, 2}) {
    absl::StatusOr<std::unique_ptr<ShardStore>> s =
        ShardStore::Create(p, index, PlainSgd(0.1f));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("--server_index"), std::string::npos);
  }
}

TEST(ShardStoreTest, RejectsInvalidOptimizerConfig) {
  Partition p = MakePartition(1);
  absl::StatusOr<std::unique_ptr<ShardStore>> s =
      ShardStore::Create(p, 0, PlainSgd(-1.0f));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--learning_rate"), std::string::npos);
}

TEST(ShardStoreTest, WeightDecayAppliesOnlyWhereDeclared) {
  ModelSpec model;
  model.tensors.push_back(
      {"decayed", DType::kFloat32, {4}, InitializerSpec::Constant(2)});
  model.tensors.push_back({"kept",
                           DType::kFloat32,
                           {4},
                           InitializerSpec::Constant(2),
                           /*weight_decay=*/false});
  OptimizerConfig sgd = PlainSgd(1.0f);
  sgd.weight_decay = 0.25f;
  auto store = *ShardStore::Create(*Partition::Create(model, 1), 0, sgd);
  for (int i = 0; i < store->num_slices(); ++i) {
    ASSERT_TRUE(store->ApplyGradient(i, std::vector<float>(4, 0.0f)).ok());
  }
  // w -= lr * (g + decay * w): 2 - 0.5 where decay applies.
  EXPECT_EQ(store->ReadSlice(0), std::vector<float>(4, 1.5f));
  EXPECT_EQ(store->ReadSlice(1), std::vector<float>(4, 2.0f));
}

TEST(ShardStoreTest, AnAssignedTensorTakesThePushedValuesWithoutOptimizer) {
  ModelSpec model;
  model.tensors.push_back(
      {"w", DType::kFloat32, {2}, InitializerSpec::Constant(2)});
  model.tensors.push_back({"running_mean",
                           DType::kFloat32,
                           {2},
                           InitializerSpec::Constant(2),
                           /*weight_decay=*/false,
                           /*assigned=*/true});
  auto store = *ShardStore::Create(*Partition::Create(model, 1), 0,
                                   OptimizerConfig::Sgd(0.5f, 0.9f, 0.0f));
  for (int i = 0; i < store->num_slices(); ++i) {
    ASSERT_TRUE(store->ApplyGradient(i, {1.0f, 3.0f}).ok());
  }
  EXPECT_EQ(store->ReadSlice(0), (std::vector<float>{1.5f, 0.5f}));
  EXPECT_EQ(store->ReadSlice(1), (std::vector<float>{1.0f, 3.0f}));
}

TEST(ShardStoreTest, ValuesFromRank0AreSetOnceForEverySliceAwaitingThem) {
  ModelSpec model;
  model.tensors.push_back(
      {"given", DType::kFloat32, {3}, InitializerSpec::FromRank0()});
  model.tensors.push_back(
      {"drawn", DType::kFloat32, {2}, InitializerSpec::Constant(1)});
  auto store =
      *ShardStore::Create(*Partition::Create(model, 1), 0, PlainSgd(1.0f));
  ASSERT_TRUE(store->awaiting_initial_values());
  EXPECT_EQ(store->FirstTensorAwaitingValues(), "given");
  EXPECT_TRUE(store->TakesValuesFromRank0(0));
  EXPECT_FALSE(store->TakesValuesFromRank0(1));
  std::vector<int> written;
  EXPECT_TRUE(store->SetInitialValues([&](int slice, absl::Span<float> out) {
    written.push_back(slice);
    for (size_t i = 0; i < out.size(); ++i) out[i] = 10.0f + i;
  }));
  EXPECT_EQ(written, std::vector<int>{0});
  EXPECT_FALSE(store->awaiting_initial_values());
  EXPECT_EQ(store->ReadSlice(0), (std::vector<float>{10, 11, 12}));
  EXPECT_EQ(store->ReadSlice(1), (std::vector<float>{1, 1}));
  // The first values stay.
  EXPECT_FALSE(store->SetInitialValues(
      [](int, absl::Span<float> out) { out[0] = -1.0f; }));
  EXPECT_EQ(store->ReadSlice(0), (std::vector<float>{10, 11, 12}));
}

}  // namespace
}  // namespace ps::update
