#include "common/partition.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

ModelSpec Tensors(const std::vector<int64_t>& sizes) {
  ModelSpec model;
  for (size_t i = 0; i < sizes.size(); ++i) {
    model.tensors.push_back(
        {absl::StrCat("t", i), DType::kFloat32, {sizes[i]}});
  }
  return model;
}

// The models the balance requirement is checked on: the MLPs we train, a
// transformer-like mix of large and small tensors, one giant tensor, many
// equal tiny ones.
std::vector<ModelSpec> TestModels() {
  std::vector<ModelSpec> models;
  models.push_back(MlpModelSpec({784, 256, 128, 10}));
  models.push_back(MlpModelSpec({784, 1024, 1024, 10}));
  models.push_back(MlpModelSpec({3072, 4096, 4096, 4096, 1000}));
  std::vector<int64_t> mixed;
  for (int layer = 0; layer < 12; ++layer) {
    mixed.insert(mixed.end(), {768 * 2304, 2304, 768 * 768, 768, 768, 768,
                               768 * 3072, 3072, 3072 * 768, 768});
  }
  models.push_back(Tensors(mixed));
  models.push_back(Tensors({1 << 24}));
  models.push_back(Tensors(std::vector<int64_t>(200, 1000)));
  return models;
}

void ExpectCoversEachElementOnce(const Partition& p) {
  const ModelSpec& model = p.model();
  for (uint32_t id = 0; id < model.tensors.size(); ++id) {
    uint64_t next = 0;
    for (const Slice& s : p.SlicesOfTensor(id)) {
      ASSERT_EQ(s.tensor_id, id);
      ASSERT_EQ(s.offset, next) << "tensor " << id << " has a gap or overlap";
      ASSERT_GT(s.num_elements, 0u);
      ASSERT_GE(s.server, 0);
      ASSERT_LT(s.server, p.num_servers());
      next += s.num_elements;
    }
    EXPECT_EQ(next, static_cast<uint64_t>(model.tensors[id].num_elements()));
  }
  uint64_t total = 0;
  for (int s = 0; s < p.num_servers(); ++s) total += p.ElementsOnServer(s);
  EXPECT_EQ(total, static_cast<uint64_t>(model.total_elements()));
}

TEST(PartitionTest, CoversEveryElementExactlyOnce) {
  for (const ModelSpec& model : TestModels()) {
    for (int servers = 1; servers <= 8; ++servers) {
      absl::StatusOr<Partition> p = Partition::Create(model, servers);
      ASSERT_TRUE(p.ok()) << p.status();
      ExpectCoversEachElementOnce(*p);
    }
  }
}

TEST(PartitionTest, BalancesBytesWithinTenPercent) {
  for (const ModelSpec& model : TestModels()) {
    for (int servers = 1; servers <= 8; ++servers) {
      absl::StatusOr<Partition> p = Partition::Create(model, servers);
      ASSERT_TRUE(p.ok()) << p.status();
      uint64_t max_elements = 0;
      for (int s = 0; s < servers; ++s) {
        max_elements = std::max(max_elements, p->ElementsOnServer(s));
      }
      const double mean = static_cast<double>(model.total_elements()) / servers;
      EXPECT_LE(max_elements / mean, 1.1)
          << model.tensors.size() << " tensors on " << servers << " servers";
    }
  }
}

TEST(PartitionTest, KeepsSmallTensorsWholeAndSplitsLargeOnes) {
  const ModelSpec model = MlpModelSpec({784, 256, 128, 10});
  absl::StatusOr<Partition> p = Partition::Create(model, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  for (uint32_t id = 0; id < model.tensors.size(); ++id) {
    if (model.tensors[id].shape.size() == 1) {  // A bias.
      EXPECT_EQ(p->SlicesOfTensor(id).size(), 1u) << model.tensors[id].name;
    }
  }
  // fc0.weight holds 85% of the elements: it cannot stay on one server.
  EXPECT_GT(p->SlicesOfTensor(0).size(), 1u);
}

TEST(PartitionTest, IsDeterministic) {
  const ModelSpec model = TestModels()[3];
  absl::StatusOr<Partition> a = Partition::Create(model, 5);
  absl::StatusOr<Partition> b = Partition::Create(model, 5);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  for (int s = 0; s < 5; ++s) {
    const auto& x = a->SlicesOfServer(s);
    const auto& y = b->SlicesOfServer(s);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i].tensor_id, y[i].tensor_id);
      EXPECT_EQ(x[i].offset, y[i].offset);
      EXPECT_EQ(x[i].num_elements, y[i].num_elements);
    }
  }
}

TEST(PartitionTest, FingerprintNamesModelAndServerCount) {
  absl::StatusOr<Partition> base =
      Partition::Create(MlpModelSpec({784, 256, 10}), 2);
  absl::StatusOr<Partition> more_servers =
      Partition::Create(MlpModelSpec({784, 256, 10}), 3);
  absl::StatusOr<Partition> other_model =
      Partition::Create(MlpModelSpec({784, 128, 10}), 2);
  ASSERT_TRUE(base.ok() && more_servers.ok() && other_model.ok());
  EXPECT_NE(base->fingerprint(), more_servers->fingerprint());
  EXPECT_NE(base->fingerprint(), other_model->fingerprint());
}

TEST(PartitionTest, RejectsBadArguments) {
  EXPECT_FALSE(Partition::Create(MlpModelSpec({4, 2}), 0).ok());
  EXPECT_FALSE(Partition::Create(ModelSpec{}, 2).ok());
  EXPECT_FALSE(Partition::Create(Tensors({4, 0}), 2).ok());
}

TEST(ModelSpecTest, ParsesLayerSizes) {
  absl::StatusOr<std::vector<int>> sizes = ParseLayerSizes("784-256-128-10");
  ASSERT_TRUE(sizes.ok());
  EXPECT_EQ(*sizes, (std::vector<int>{784, 256, 128, 10}));
}

TEST(ModelSpecTest, RejectsMalformedLayerSizes) {
  for (const char* text : {"", "784", "784-", "784--10", "784-x-10", "784-0-10",
                           "-784-10", "784-99999999-10"}) {
    absl::StatusOr<std::vector<int>> sizes = ParseLayerSizes(text);
    EXPECT_FALSE(sizes.ok()) << text;
    EXPECT_EQ(sizes.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ModelSpecTest, BuildsWeightsAndBiasesPerLayer) {
  const ModelSpec model = MlpModelSpec({784, 256, 10});
  ASSERT_EQ(model.tensors.size(), 4u);
  EXPECT_EQ(model.tensors[0].name, "fc0.weight");
  EXPECT_EQ(model.tensors[0].shape, (std::vector<int64_t>{784, 256}));
  EXPECT_EQ(model.tensors[1].shape, (std::vector<int64_t>{256}));
  EXPECT_EQ(model.total_elements(), 784 * 256 + 256 + 256 * 10 + 10);
}

}  // namespace
}  // namespace ps
