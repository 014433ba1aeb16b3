#include "update/checkpoint_model.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "update/checkpoint.h"

namespace ps::update {
namespace {

constexpr int kServers = 3;

ModelSpec Model() {
  ModelSpec m = MlpModelSpec({5, 4, 3});
  m.optimizer = OptimizerSpec::Sgd(0.1f, 0.9f);
  return m;
}

// Element e of tensor t holds t * 1000 + e.
float Value(uint32_t tensor, uint64_t element) {
  return static_cast<float>(tensor * 1000 + element);
}

// Shard `s`'s checkpoint at `version`, with Value()s in its slices.
ShardCheckpoint ShardAt(int s, uint64_t version) {
  ShardCheckpoint c;
  c.identity = {kServers, s, "sync", 1};
  c.model = Model();
  const Partition partition = *Partition::Create(c.model, kServers);
  c.partition_fingerprint = partition.fingerprint();
  c.version = version;
  c.ranks.resize(1);
  for (const Slice& slice : partition.SlicesOfServer(s)) {
    SliceSnapshot& snapshot = c.slices.emplace_back();
    for (uint64_t i = 0; i < slice.num_elements; ++i) {
      snapshot.weights.push_back(Value(slice.tensor_id, slice.offset + i));
    }
  }
  return c;
}

class CheckpointModelTest : public ::testing::Test {
 protected:
  CheckpointModelTest()
      : dir_(absl::StrCat(
            std::getenv("TEST_TMPDIR"), "/",
            ::testing::UnitTest::GetInstance()->current_test_info()->name())) {}

  void Write(int s, uint64_t version) {
    ASSERT_TRUE(WriteCheckpoint(dir_, ShardAt(s, version), 5).ok());
  }

  std::string dir_;
};

TEST_F(CheckpointModelTest, PutsEveryShardsSlicesTogether) {
  for (int s = 0; s < kServers; ++s) {
    Write(s, 7);
    Write(s, 9);
  }
  Write(0, 11);  // Shard 0 alone got further: not a complete model.
  absl::StatusOr<CheckpointedModel> read = ReadCheckpointedModel(dir_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->version, 9u);
  EXPECT_TRUE(CompareModelSpecs(Model(), "written", read->model, "read").ok());
  ASSERT_EQ(read->weights.size(), Model().tensors.size());
  for (uint32_t t = 0; t < read->weights.size(); ++t) {
    ASSERT_EQ(read->weights[t].size(),
              static_cast<size_t>(Model().tensors[t].num_elements()));
    for (uint64_t e = 0; e < read->weights[t].size(); ++e) {
      ASSERT_EQ(read->weights[t][e], Value(t, e)) << t << " " << e;
    }
  }
}

TEST_F(CheckpointModelTest, NoCheckpointIsNotFound) {
  EXPECT_EQ(ReadCheckpointedModel(dir_).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CheckpointModelTest, ShardsWithoutACommonVersionAreNamed) {
  Write(0, 4);
  Write(1, 4);
  Write(2, 5);
  absl::Status s = ReadCheckpointedModel(dir_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("shard 1: [4]; shard 2: [5]"), std::string::npos)
      << s;
}

TEST_F(CheckpointModelTest, AMissingShardIsNamed) {
  Write(0, 4);
  Write(2, 4);
  absl::Status s = ReadCheckpointedModel(dir_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("shard 1: []"), std::string::npos) << s;
}

}  // namespace
}  // namespace ps::update
