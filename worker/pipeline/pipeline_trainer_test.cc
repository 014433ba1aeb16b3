#include "worker/pipeline/pipeline_trainer.h"

#include <sys/socket.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "client/parameter_client.h"
#include "common/local_socket.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "worker/dataset.h"
#include "worker/idx_reader.h"
#include "worker/nn/model.h"
#include "worker/nn/model_description.h"
#include "worker/nn/reference_net.h"
#include "worker/nn/stage_model.h"
#include "worker/nn/stage_split.h"
#include "worker/weight_exchange.h"

namespace ps::worker::pipeline {
namespace {

namespace ref = ::ps::worker::nn::testing;

// The servers as one rank sees them: fixed weights, and every push kept.
class RecordingExchange final : public WeightExchange {
 public:
  struct Push {
    StepInfo info;
    std::map<int, std::vector<float>> gradients;
  };

  RecordingExchange(ModelSpec spec, TensorValues weights)
      : spec_(std::move(spec)), weights_(std::move(weights)) {}

  const ModelSpec& model() const override { return spec_; }
  absl::StatusOr<uint64_t> Pull(uint64_t clock, TensorValues& w) override {
    w = weights_;
    return clock;
  }
  absl::StatusOr<uint64_t> PullFinal(uint64_t clock, TensorValues& w) override {
    return Pull(clock, w);
  }
  std::unique_ptr<StepPush> StartStep(const StepInfo& info,
                                      bool pull_after) override {
    pushes.push_back({info, {}});
    return std::make_unique<Recorder>(this, &pushes.back());
  }

  std::vector<Push> pushes;

 private:
  class Recorder final : public StepPush {
   public:
    Recorder(RecordingExchange* owner, Push* push)
        : owner_(owner), push_(push) {}
    absl::Status Send(int id, absl::Span<const float> g) override {
      push_->gradients[id].assign(g.begin(), g.end());
      return absl::OkStatus();
    }
    absl::Status Finish() override { return absl::OkStatus(); }
    absl::StatusOr<uint64_t> FinishWithPull(TensorValues& w) override {
      return owner_->Pull(push_->info.step + 1, w);
    }

   private:
    RecordingExchange* owner_;
    Push* push_;
  };

  ModelSpec spec_;
  TensorValues weights_;
};

constexpr char kNet[] = "input 1x4x4; conv 2 3x3; relu; flatten; dense 3";
constexpr int kBatch = 6;

LabeledImages Data(int n) {
  LabeledImages d;
  d.num_examples = n;
  d.rows = 4;
  d.cols = 4;
  const std::vector<double> u = ref::Uniform(n * 16, 9, 0, 1);
  d.images.assign(u.begin(), u.end());
  for (int i = 0; i < n; ++i) d.labels.push_back(i % 3);
  return d;
}

// Two stages of replica 1 of 2 push, between them, their replica's
// unsplit gradient times 2 (the stages), each for its own tensors and
// zeros for the other's, with the replica's examples and data position.
TEST(PipelineTrainerTest, StagesPushTheirReplicasGradientKTimesAndZeros) {
  const nn::ModelDescription d = *nn::ModelDescription::Parse(kNet);
  const ModelSpec spec = d.Spec(1);
  TensorValues weights;
  for (size_t t = 0; t < spec.tensors.size(); ++t) {
    const std::vector<double> u =
        ref::Uniform(spec.tensors[t].num_elements(), 30 + t, -.5, .5);
    weights.emplace_back(u.begin(), u.end());
  }
  const LabeledImages train = Data(40);
  constexpr int kStages = 2;
  auto ranges = *nn::SplitByParameterBytes(d, kStages);
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::vector<Neighbours> neighbours(kStages);
  neighbours[0].next = std::make_unique<StageLink>(
      std::make_unique<LocalSocket>(fds[0]), LinkPeer{1, 3});
  neighbours[1].previous = std::make_unique<StageLink>(
      std::make_unique<LocalSocket>(fds[1]), LinkPeer{0, 2});
  std::vector<std::unique_ptr<RecordingExchange>> exchanges;
  for (int s = 0; s < kStages; ++s) {
    exchanges.push_back(std::make_unique<RecordingExchange>(spec, weights));
  }
  std::vector<std::thread> threads;
  for (int s = 0; s < kStages; ++s) {
    threads.emplace_back([&, s] {
      auto backend = *kernels::CreateCpuBackend();
      auto stage =
          *nn::StageModel::Create(d, ranges[s], {kBatch, 1}, backend.get());
      PipelineTrainerOptions options;
      options.place = *PipelinePlace::FromRank(2 + s, 4, kStages);
      options.batch_size = kBatch;
      options.micro_batches = 1;
      options.epochs = 1;
      options.max_steps = 2;
      absl::StatusOr<std::unique_ptr<PipelineTrainer>> trainer =
          PipelineTrainer::Create(options, exchanges[s].get(), stage.get(),
                                  &neighbours[s], nullptr, &train, nullptr);
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      EXPECT_EQ((*trainer)->planned_steps(), 2u);
      absl::StatusOr<TrainingSummary> summary = (*trainer)->Run({});
      ASSERT_TRUE(summary.ok()) << summary.status();
      EXPECT_EQ(summary->steps, 2u);
    });
  }
  for (std::thread& t : threads) t.join();

  // Replica 1's batches, as an unsplit rank 1 of 2 would take them.
  auto sharder = *EpochSharder::Create(40, 2, kBatch, 1);
  const EpochPlan plan = sharder.PlanEpoch(0);
  auto backend = *kernels::CreateCpuBackend();
  auto whole = *nn::CreateModel(d, {kBatch, 1}, backend.get());
  for (size_t t = 0; t < weights.size(); ++t) {
    ASSERT_TRUE(whole->SetWeights(t, weights[t]).ok());
  }
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(step);
    Batch batch;
    ASSERT_TRUE(GatherBatch(train, *plan.BatchIndices(step, 1), &batch).ok());
    ASSERT_TRUE(whole
                    ->Forward(batch.images, batch.labels, kBatch,
                              {static_cast<uint64_t>(step), kBatch})
                    .ok());
    std::map<int, std::vector<float>> want;
    ASSERT_TRUE(whole
                    ->Backward([&](int id, absl::Span<const float> g) {
                      for (float v : g) want[id].push_back(2 * v);
                      return absl::OkStatus();
                    })
                    .ok());
    for (int s = 0; s < kStages; ++s) {
      const RecordingExchange::Push& push = exchanges[s]->pushes[step];
      EXPECT_EQ(push.info.step, static_cast<uint64_t>(step));
      EXPECT_EQ(push.info.num_examples, static_cast<uint32_t>(kBatch));
      EXPECT_EQ(push.info.cursor.examples_done,
                static_cast<uint64_t>((step + 1) * kBatch));
      ASSERT_EQ(push.gradients.size(), spec.tensors.size());
      for (const auto& [id, g] : push.gradients) {
        if (id >= ranges[s].first_tensor && id < ranges[s].end_tensor) {
          EXPECT_EQ(g, want[id]) << spec.tensors[id].name;
        } else {
          EXPECT_EQ(g, std::vector<float>(g.size(), 0.0f))
              << spec.tensors[id].name << " is stage " << 1 - s << "'s";
        }
      }
    }
  }
}

}  // namespace
}  // namespace ps::worker::pipeline
