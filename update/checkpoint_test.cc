#include "update/checkpoint.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "common/record_file.h"
#include "gtest/gtest.h"

namespace ps::update {
namespace {

CheckpointIdentity Identity() { return {2, 1, "ssp", 2}; }

// A declaration no flag describes, with every initializer's parameters.
ModelSpec SampleModel() {
  ModelSpec m;
  m.seed = 77;
  m.tensors.push_back(
      {"a/b.c", DType::kFloat32, {3, 5, 7}, InitializerSpec::Normal(0, 0.5)});
  m.tensors.push_back(
      {"scale", DType::kFloat32, {}, InitializerSpec::Constant(2), false});
  m.tensors.push_back(
      {"e", DType::kFloat32, {4}, InitializerSpec::FromRank0()});
  return m;
}

ShardCheckpoint Sample(uint64_t version) {
  ShardCheckpoint c;
  c.identity = Identity();
  c.model = SampleModel();
  c.partition_fingerprint = Partition::Create(c.model, 2)->fingerprint();
  c.version = version;
  c.planned_steps = 3750;
  c.ranks = {{11, 7, {1, 320}, false, 32}, {12, 9, {2, 64}, true, 0}};
  c.examples = {{0, {30000, 29990}}, {1, {320, 30000}}};
  c.staleness.buckets[0] = 5;
  c.staleness.buckets[3] = 2;
  c.staleness.count = 7;
  c.staleness.max = 3;
  c.staleness.sum = 6.5;
  SliceSnapshot s;
  s.weights = {1.5f, -2.0f, 0.25f};
  s.update_count = 9;
  s.state = {{"m", {0.1f, 0.2f, 0.3f}}, {"v", {1e-8f, 2.0f, 3.0f}}};
  c.slices = {s, SliceSnapshot{{4.0f}, 9, {{"m", {0.5f}}, {"v", {0.75f}}}}};
  return c;
}

void ExpectSame(const ShardCheckpoint& a, const ShardCheckpoint& b) {
  EXPECT_EQ(a.identity.num_servers, b.identity.num_servers);
  EXPECT_EQ(a.partition_fingerprint, b.partition_fingerprint);
  EXPECT_TRUE(CompareModelSpecs(a.model, "written", b.model, "read").ok());
  EXPECT_EQ(a.identity.server_index, b.identity.server_index);
  EXPECT_EQ(a.identity.mode, b.identity.mode);
  EXPECT_EQ(a.identity.num_workers, b.identity.num_workers);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.planned_steps, b.planned_steps);
  EXPECT_EQ(a.ranks, b.ranks);
  EXPECT_EQ(a.examples, b.examples);
  EXPECT_EQ(a.staleness.buckets, b.staleness.buckets);
  EXPECT_EQ(a.staleness.count, b.staleness.count);
  EXPECT_EQ(a.staleness.max, b.staleness.max);
  EXPECT_EQ(a.staleness.sum, b.staleness.sum);
  ASSERT_EQ(a.slices.size(), b.slices.size());
  for (size_t i = 0; i < a.slices.size(); ++i) {
    EXPECT_EQ(a.slices[i].weights, b.slices[i].weights);
    EXPECT_EQ(a.slices[i].update_count, b.slices[i].update_count);
    EXPECT_EQ(a.slices[i].state, b.slices[i].state);
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(
        tmp != nullptr ? tmp : "/tmp", "/ckpt_",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }

  std::string Path(uint64_t version) const {
    return absl::StrCat(dir_, "/", CheckpointFileName(1, version));
  }

  std::string Read(const std::string& path) const {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void Write(const std::string& path, const std::string& bytes) const {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }

  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripsThroughAFile) {
  absl::StatusOr<std::string> path = WriteCheckpoint(dir_, Sample(42));
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, Path(42));
  absl::StatusOr<std::optional<LoadedCheckpoint>> loaded =
      LoadNewestCheckpoint(dir_, Identity());
  ASSERT_TRUE(loaded.ok() && loaded->has_value()) << loaded.status();
  EXPECT_EQ((*loaded)->path, Path(42));
  EXPECT_TRUE((*loaded)->skipped.empty());
  ExpectSame((*loaded)->checkpoint, Sample(42));
}

TEST_F(CheckpointTest, NoCheckpointAtAllIsNotAnError) {
  absl::StatusOr<std::optional<LoadedCheckpoint>> loaded =
      LoadNewestCheckpoint(dir_, Identity());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->has_value());
}

TEST_F(CheckpointTest, ATruncatedNewestIsRefusedAndThePreviousOneUsed) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(10)).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(20)).ok());
  const std::string bytes = Read(Path(20));
  Write(Path(20), bytes.substr(0, bytes.size() - 9));
  absl::StatusOr<std::optional<LoadedCheckpoint>> loaded =
      LoadNewestCheckpoint(dir_, Identity());
  ASSERT_TRUE(loaded.ok() && loaded->has_value()) << loaded.status();
  EXPECT_EQ((*loaded)->path, Path(10));
  ExpectSame((*loaded)->checkpoint, Sample(10));
  ASSERT_EQ((*loaded)->skipped.size(), 1u);
  EXPECT_NE((*loaded)->skipped[0].find(Path(20)), std::string::npos);
  // Set aside, so that the next restore does not trip on it again.
  EXPECT_FALSE(std::filesystem::exists(Path(20)));
  EXPECT_TRUE(std::filesystem::exists(Path(20) + ".corrupt"));
}

TEST_F(CheckpointTest, AFlippedByteIsRefusedAndThePreviousOneUsed) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(10)).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(20)).ok());
  std::string bytes = Read(Path(20));
  bytes[bytes.size() / 2] ^= 0x10;
  Write(Path(20), bytes);
  absl::StatusOr<std::optional<LoadedCheckpoint>> loaded =
      LoadNewestCheckpoint(dir_, Identity());
  ASSERT_TRUE(loaded.ok() && loaded->has_value()) << loaded.status();
  EXPECT_EQ((*loaded)->path, Path(10));
  ASSERT_EQ((*loaded)->skipped.size(), 1u);
  EXPECT_NE((*loaded)->skipped[0].find("checksum"), std::string::npos)
      << (*loaded)->skipped[0];
}

TEST_F(CheckpointTest, NoReadableCheckpointIsAnErrorNamingEveryFile) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(10)).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(20)).ok());
  for (uint64_t v : {10, 20}) Write(Path(v), Read(Path(v)).substr(0, 30));
  absl::StatusOr<std::optional<LoadedCheckpoint>> loaded =
      LoadNewestCheckpoint(dir_, Identity());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find(Path(10)), std::string::npos);
  EXPECT_NE(loaded.status().message().find(Path(20)), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(Path(20)));  // Left for a human.
}

TEST_F(CheckpointTest, AnotherJobsCheckpointIsRefusedNamingWhatDiffers) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(10)).ok());
  CheckpointIdentity other_layout = Identity();
  other_layout.num_servers = 3;
  absl::StatusOr<std::optional<LoadedCheckpoint>> loaded =
      LoadNewestCheckpoint(dir_, other_layout);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find(
                absl::StrCat("cannot restore ", Path(10),
                             ": checkpoint is of another server count: 2, "
                             "this shard's is 3 (check --num_servers)")),
            std::string::npos)
      << loaded.status();
  CheckpointIdentity other_workers = Identity();
  other_workers.num_workers = 4;
  EXPECT_NE(CheckIdentity(other_workers, Identity())
                .message()
                .find("worker count: 2, this shard's is 4"),
            std::string::npos);
}

TEST_F(CheckpointTest, ADeclarationThatDoesNotGiveTheFingerprintIsDataLoss) {
  ShardCheckpoint c = Sample(10);
  c.partition_fingerprint ^= 1;
  absl::StatusOr<ShardCheckpoint> decoded =
      DecodeCheckpoint(EncodeCheckpoint(c));
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(decoded.status().message().find("partition fingerprint"),
            std::string::npos)
      << decoded.status();
  std::vector<std::string> records = EncodeCheckpoint(Sample(10));
  records[1] = "not a declaration";
  EXPECT_EQ(DecodeCheckpoint(records).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(CheckpointTest, KeepsTheNewestTwoAndIgnoresOtherFiles) {
  for (uint64_t v : {200, 400, 600}) {
    ASSERT_TRUE(WriteCheckpoint(dir_, Sample(v)).ok());
  }
  Write(absl::StrCat(dir_, "/shard-2-900.ckpt"), "another shard");
  Write(absl::StrCat(dir_, "/shard-1-900.ckpt.tmp"), "unfinished");
  Write(absl::StrCat(dir_, "/shard-1-x9.ckpt"), "not a version");
  absl::StatusOr<std::vector<std::string>> listed = ListCheckpoints(dir_, 1);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, (std::vector<std::string>{Path(600), Path(400)}));
  // An older version just written is kept too.
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(100)).ok());
  EXPECT_EQ(*ListCheckpoints(dir_, 1),
            (std::vector<std::string>{Path(600), Path(400), Path(100)}));
}

TEST(CheckpointCodecTest, RefusesMalformedRecordsNamingThem) {
  const std::vector<std::string> good = EncodeCheckpoint(Sample(1));
  ASSERT_TRUE(DecodeCheckpoint(good).ok());
  struct Case {
    size_t record;
    const char* text;
  };
  for (const Case& c :
       {Case{0, "header"}, Case{2, "ranks record"}, Case{3, "examples record"},
        Case{4, "staleness record"}, Case{5, "slice 0 record"}}) {
    for (int cut : {1, -1}) {  // One byte short, one byte too many.
      std::vector<std::string> bad = good;
      if (cut < 0) {
        bad[c.record].push_back('x');
      } else {
        bad[c.record].pop_back();
      }
      absl::StatusOr<ShardCheckpoint> decoded = DecodeCheckpoint(bad);
      EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_NE(decoded.status().message().find(c.text), std::string::npos)
          << decoded.status();
    }
  }
  std::vector<std::string> few(good.begin(), good.begin() + 3);
  EXPECT_EQ(DecodeCheckpoint(few).status().code(), absl::StatusCode::kDataLoss);
  std::vector<std::string> newer = good;
  newer[0][0] = 4;  // Format version 4.
  EXPECT_NE(DecodeCheckpoint(newer).status().message().find("format 4"),
            std::string::npos);
}

// Format 2 had no bound on a rank's examples a push: such a checkpoint
// restores with none.
TEST(CheckpointCodecTest, ReadsFormatTwoWithoutExampleBounds) {
  std::vector<std::string> records = EncodeCheckpoint(Sample(1));
  records[0][0] = 2;
  // Each rank's record ends with its 4-byte bound: take them out.
  std::string& ranks = records[2];
  const size_t per_rank = ranks.size() / 2;
  ranks = ranks.substr(0, per_rank - 4) + ranks.substr(per_rank, per_rank - 4);
  absl::StatusOr<ShardCheckpoint> decoded = DecodeCheckpoint(records);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ShardCheckpoint expected = Sample(1);
  for (RankRecord& rank : expected.ranks) rank.max_examples = 0;
  ExpectSame(*decoded, expected);
}

}  // namespace
}  // namespace ps::update
