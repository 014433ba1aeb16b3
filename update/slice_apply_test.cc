#include "update/slice_apply.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "update/optimizer.h"
#include "update/shard_store.h"

namespace ps::update {
namespace {

// A one-server store of an MLP with layers `sizes`.
std::unique_ptr<ShardStore> MakeStore(std::vector<int> sizes) {
  absl::StatusOr<Partition> partition =
      Partition::Create(MlpModelSpec(sizes), /*num_servers=*/1);
  EXPECT_TRUE(partition.ok()) << partition.status();
  absl::StatusOr<std::unique_ptr<ShardStore>> store =
      ShardStore::Create(*partition, 0, OptimizerConfig());
  EXPECT_TRUE(store.ok()) << store.status();
  return *std::move(store);
}

// Small enough for the calling thread, and large enough for the pool.
std::vector<std::unique_ptr<ShardStore>> SmallAndLargeStores() {
  std::vector<std::unique_ptr<ShardStore>> stores;
  stores.push_back(MakeStore({20, 30, 5}));
  stores.push_back(MakeStore({1024, 1024}));
  EXPECT_LT(stores[0]->num_elements(), uint64_t{1} << 20);
  EXPECT_GE(stores[1]->num_elements(), uint64_t{1} << 20);
  return stores;
}

TEST(ForEachSliceTest, CallsEverySliceOnce) {
  for (const std::unique_ptr<ShardStore>& store : SmallAndLargeStores()) {
    std::vector<std::atomic<int>> calls(store->num_slices());
    EXPECT_TRUE(ForEachSlice(*store, [&](int slice) {
                  calls[slice].fetch_add(1);
                  return absl::OkStatus();
                }).ok());
    for (int s = 0; s < store->num_slices(); ++s) {
      EXPECT_EQ(calls[s].load(), 1) << "slice " << s;
    }
  }
}

TEST(ForEachSliceTest, ReturnsTheFirstErrorInSliceOrderAfterEveryCall) {
  for (const std::unique_ptr<ShardStore>& store : SmallAndLargeStores()) {
    const int n = store->num_slices();
    ASSERT_GE(n, 2);
    std::atomic<int> calls{0};
    const absl::Status status = ForEachSlice(*store, [&](int slice) {
      calls.fetch_add(1);
      if (slice == 0) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat("slice ", slice));
    });
    EXPECT_EQ(status, absl::InvalidArgumentError("slice 1"));
    EXPECT_EQ(calls.load(), n);
  }
}

}  // namespace
}  // namespace ps::update
