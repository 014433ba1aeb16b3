// DescribeOptimizerState and OptimizerStateAssembly on a shard's store,
// without the service: what a header lists, and how chunks are taken.

#include "server/optimizer_state.h"

#include <memory>
#include <string>
#include <vector>

#include "common/model_spec.h"
#include "common/partition.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"
#include "update/shard_store.h"

namespace ps::server {
namespace {

ModelSpec Model() {
  ModelSpec model;
  TensorSpec a;
  a.name = "a";
  a.shape = {6};
  TensorSpec b;
  b.name = "b";
  b.shape = {2, 2};
  model.tensors = {a, b};
  return model;
}

std::unique_ptr<update::ShardStore> Store(const Partition& partition,
                                          const OptimizerSpec& optimizer) {
  return *update::ShardStore::Create(partition, 0, optimizer);
}

proto::OptimizerStateChunk Chunk(uint32_t slice, uint32_t vector,
                                 uint64_t offset, std::vector<float> values) {
  proto::OptimizerStateChunk chunk;
  chunk.set_slice(slice);
  chunk.set_vector(vector);
  chunk.set_offset(offset);
  EncodeFloats(values, chunk.mutable_data());
  return chunk;
}

TEST(DescribeOptimizerStateTest, PlainSgdListsSlicesWithoutVectors) {
  const Partition partition = *Partition::Create(Model(), 1);
  auto store = Store(partition, OptimizerSpec::Sgd(0.1f));
  std::vector<update::SliceSnapshot> slices;
  for (int i = 0; i < store->num_slices(); ++i) {
    slices.push_back(store->SnapshotOptimizerState(i));
  }
  const proto::OptimizerStateHeader header =
      DescribeOptimizerState(*store, 4, slices);
  EXPECT_EQ(header.kind(), proto::OptimizerDeclaration::SGD);
  EXPECT_EQ(header.version(), 4u);
  ASSERT_EQ(header.slices_size(), 2);
  EXPECT_EQ(header.slices(1).tensor(), "b");
  EXPECT_EQ(header.slices(1).num_elements(), 4u);
  EXPECT_EQ(header.slices(1).vectors_size(), 0);
  // Such a state is written back whole with no chunk at all.
  absl::StatusOr<OptimizerStateAssembly> assembly =
      OptimizerStateAssembly::Start(*store, header);
  ASSERT_TRUE(assembly.ok()) << assembly.status();
  EXPECT_TRUE(std::move(*assembly).Finish().ok());
}

TEST(OptimizerStateAssemblyTest, TakesVectorsInAnyOrderAndChunksInOrder) {
  const Partition partition = *Partition::Create(Model(), 1);
  auto store = Store(partition, OptimizerSpec::Adam(0.1f));
  std::vector<update::SliceSnapshot> slices;
  for (int i = 0; i < store->num_slices(); ++i) {
    slices.push_back(store->SnapshotOptimizerState(i));
  }
  proto::OptimizerStateHeader header =
      DescribeOptimizerState(*store, 0, slices);
  header.mutable_slices(0)->set_update_count(3);
  absl::StatusOr<OptimizerStateAssembly> assembly =
      OptimizerStateAssembly::Start(*store, header);
  ASSERT_TRUE(assembly.ok()) << assembly.status();
  ASSERT_TRUE(assembly->Add(Chunk(1, 1, 0, {1, 2, 3, 4})).ok());
  ASSERT_TRUE(assembly->Add(Chunk(1, 0, 0, {5, 6, 7, 8})).ok());
  ASSERT_TRUE(assembly->Add(Chunk(0, 0, 0, {1, 1, 1})).ok());
  ASSERT_TRUE(assembly->Add(Chunk(0, 0, 3, {2, 2, 2})).ok());
  // A chunk again: not where the vector goes on.
  EXPECT_EQ(assembly->Add(Chunk(0, 0, 3, {2})).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(assembly->Add(Chunk(0, 1, 0, {9, 9, 9, 9, 9, 9})).ok());
  absl::StatusOr<std::vector<update::SliceSnapshot>> done =
      std::move(*assembly).Finish();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ((*done)[0].update_count, 3u);
  EXPECT_EQ((*done)[0].state[0].second, std::vector<float>({1, 1, 1, 2, 2, 2}));
  EXPECT_EQ((*done)[1].state[0].first, "m");
  EXPECT_EQ((*done)[1].state[0].second, std::vector<float>({5, 6, 7, 8}));
  EXPECT_EQ((*done)[1].state[1].second, std::vector<float>({1, 2, 3, 4}));
  EXPECT_TRUE(store->RestoreOptimizerState(*done).ok());
  EXPECT_EQ(store->SnapshotOptimizerState(1).state, (*done)[1].state);
}

TEST(OptimizerStateAssemblyTest, FinishNamesTheFirstVectorShort) {
  const Partition partition = *Partition::Create(Model(), 1);
  auto store = Store(partition, OptimizerSpec::Sgd(0.1f, 0.5f));
  std::vector<update::SliceSnapshot> slices;
  for (int i = 0; i < store->num_slices(); ++i) {
    slices.push_back(store->SnapshotOptimizerState(i));
  }
  absl::StatusOr<OptimizerStateAssembly> assembly =
      OptimizerStateAssembly::Start(*store,
                                    DescribeOptimizerState(*store, 0, slices));
  ASSERT_TRUE(assembly.ok());
  ASSERT_TRUE(assembly->Add(Chunk(0, 0, 0, {1, 2, 3, 4, 5, 6})).ok());
  ASSERT_TRUE(assembly->Add(Chunk(1, 0, 0, {1})).ok());
  const absl::Status s = std::move(*assembly).Finish().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "optimizer state of \"b\" momentum: 1 of 4 elements came");
}

}  // namespace
}  // namespace ps::server
