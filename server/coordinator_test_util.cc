#include "server/coordinator_test_util.h"

#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "common/model_spec.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"

namespace ps::server::testing {

update::OptimizerConfig PlainSgd() {
  update::OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.learning_rate = 1.0f;
  c.momentum = 0.0f;
  return c;
}

std::unique_ptr<update::ShardStore> MakeStore(
    std::vector<int> layers, const update::OptimizerConfig& config,
    int num_servers, int index) {
  absl::StatusOr<Partition> p =
      Partition::Create(MlpModelSpec(layers), num_servers);
  EXPECT_TRUE(p.ok());
  return *update::ShardStore::Create(*p, index, config);
}

CoordinatorOptions FastOptions(ConsistencyMode mode, int num_workers,
                               int staleness) {
  CoordinatorOptions options;
  options.mode = mode;
  options.num_workers = num_workers;
  options.staleness = staleness;
  options.poll_interval = absl::Milliseconds(5);
  return options;
}

std::unique_ptr<UpdateCoordinator> MakeCoordinator(update::ShardStore* store,
                                                   ConsistencyMode mode,
                                                   int num_workers,
                                                   int staleness) {
  absl::StatusOr<std::unique_ptr<UpdateCoordinator>> c =
      UpdateCoordinator::Create(store,
                                FastOptions(mode, num_workers, staleness));
  EXPECT_TRUE(c.ok()) << c.status();
  RegisterAll(**c, num_workers);
  return *std::move(c);
}

uint64_t IncarnationOf(int rank) { return 1000 + rank; }

void RegisterAll(UpdateCoordinator& coordinator, int num_workers) {
  for (int rank = 0; rank < num_workers; ++rank) {
    absl::StatusOr<RankProgress> registered =
        coordinator.Register(rank, IncarnationOf(rank), 0);
    EXPECT_TRUE(registered.ok()) << registered.status();
  }
}

StagedPush ConstantPush(const update::ShardStore& store, int rank,
                        uint64_t step, float value, uint32_t num_examples,
                        uint64_t base_version) {
  StagedPush p;
  p.rank = rank;
  p.incarnation = IncarnationOf(rank);
  p.step = step;
  p.base_version = base_version;
  p.num_examples = num_examples;
  p.epoch = 0;
  // A worker's cursor after `step + 1` batches of this size.
  p.examples_done = (step + 1) * num_examples;
  for (const Slice& s : store.slices()) {
    p.gradients.push_back(
        SliceGradient::FromFloats(std::vector<float>(s.num_elements, value)));
  }
  return p;
}

update::OptimizerConfig Adam() {
  update::OptimizerConfig c;
  c.learning_rate = 0.01f;
  return c;
}

StagedPush VariedPush(const update::ShardStore& store, int rank,
                      uint64_t step) {
  StagedPush p = ConstantPush(store, rank, step, 0.0f, 3 + rank,
                              /*base_version=*/step > 0 ? step - 1 : 0);
  std::vector<std::vector<float>> values = GradientValues(p);
  for (std::vector<float>& g : values) {
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = 0.1f * static_cast<float>((i * 7 + step * 3 + rank) % 11) - 0.5f;
    }
  }
  SetGradientValues(p, values);
  return p;
}

std::unique_ptr<update::ShardStore> MakeAdamStore() {
  return MakeStore({30, 20, 10}, Adam());
}

std::vector<StagedPush> RandomPushes(const update::ShardStore& store) {
  std::vector<StagedPush> pushes;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const uint32_t examples[kRandomPushRanks] = {7, 64, 1, 33};
  for (int r = 0; r < kRandomPushRanks; ++r) {
    StagedPush p = ConstantPush(store, r, 0, 0.0f, examples[r]);
    std::vector<std::vector<float>> values = GradientValues(p);
    for (std::vector<float>& g : values) {
      for (float& v : g) v = dist(rng) * std::pow(10.0f, r);
    }
    SetGradientValues(p, values);
    pushes.push_back(std::move(p));
  }
  return pushes;
}

std::vector<std::vector<float>> ReferenceMeanStep() {
  auto store = MakeAdamStore();
  std::vector<StagedPush> pushes = RandomPushes(*store);
  double total = 0;
  std::vector<std::vector<std::vector<float>>> values;  // [rank][slice]
  for (const StagedPush& p : pushes) {
    total += p.num_examples;
    values.push_back(GradientValues(p));
  }
  for (int s = 0; s < store->num_slices(); ++s) {
    std::vector<float> g(store->slices()[s].num_elements);
    for (size_t i = 0; i < g.size(); ++i) {
      double sum = 0;
      for (size_t r = 0; r < pushes.size(); ++r) {
        sum += static_cast<double>(pushes[r].num_examples) * values[r][s][i];
      }
      g[i] = static_cast<float>(sum / total);
    }
    EXPECT_TRUE(store->ApplyGradient(s, g).ok());
  }
  return AllWeights(*store);
}

std::vector<std::vector<float>> GradientValues(const StagedPush& push) {
  std::vector<std::vector<float>> values;
  for (const SliceGradient& g : push.gradients) {
    values.emplace_back(g.num_elements());
    g.Read(0, absl::MakeSpan(values.back()));
  }
  return values;
}

void SetGradientValues(StagedPush& push,
                       const std::vector<std::vector<float>>& values) {
  push.gradients.clear();
  for (const std::vector<float>& v : values) {
    push.gradients.push_back(SliceGradient::FromFloats(v));
  }
}

std::vector<std::vector<float>> AllWeights(const update::ShardStore& store) {
  std::vector<std::vector<float>> w;
  for (int i = 0; i < store.num_slices(); ++i) w.push_back(store.ReadSlice(i));
  return w;
}

void ExpectShiftedBy(const std::vector<std::vector<float>>& before,
                     const std::vector<std::vector<float>>& after,
                     float delta) {
  ASSERT_EQ(before.size(), after.size());
  for (size_t s = 0; s < before.size(); ++s) {
    for (size_t i = 0; i < before[s].size(); ++i) {
      ASSERT_FLOAT_EQ(after[s][i], before[s][i] - delta)
          << "slice " << s << " element " << i;
    }
  }
}

void ExpectBitIdentical(const std::vector<std::vector<float>>& a,
                        const std::vector<std::vector<float>>& b,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t s = 0; s < a.size(); ++s) {
    ASSERT_EQ(a[s].size(), b[s].size());
    ASSERT_EQ(
        0, std::memcmp(a[s].data(), b[s].data(), a[s].size() * sizeof(float)))
        << "slice " << s << " differs: " << what;
  }
}

absl::StatusOr<uint64_t> Pull(UpdateCoordinator& coordinator, int rank,
                              uint64_t step) {
  return coordinator.AwaitPull(rank, IncarnationOf(rank), step, [&] {
    // As a client's heartbeats go on while its pull waits (refused once
    // another process registered the rank, which ends the pull anyway).
    (void)coordinator.Heartbeat(rank, IncarnationOf(rank));
    return false;
  });
}

LogCapture::LogCapture() : previous_(spdlog::default_logger()) {
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)));
}

LogCapture::~LogCapture() { spdlog::set_default_logger(previous_); }

}  // namespace ps::server::testing
