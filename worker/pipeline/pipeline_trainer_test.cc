#include "worker/pipeline/pipeline_trainer.h"

#include <sys/socket.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/parameter_client.h"
#include "common/local_socket.h"
#include "common/model_file.h"
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

// The stage of `range`'s part of the whole model's values and declaration.
ModelSpec StageSpec(const ModelSpec& whole, const nn::StageRange& range) {
  ModelSpec spec;
  spec.tensors.assign(whole.tensors.begin() + range.first_tensor,
                      whole.tensors.begin() + range.end_tensor);
  return spec;
}

TensorValues StageValues(const TensorValues& whole,
                         const nn::StageRange& range) {
  return TensorValues(whole.begin() + range.first_tensor,
                      whole.begin() + range.end_tensor);
}

struct TwoStages {
  nn::ModelDescription description = *nn::ModelDescription::Parse(kNet);
  ModelSpec spec = description.Spec(1);
  std::vector<nn::StageRange> ranges =
      *nn::SplitByParameterBytes(description, 2);
  TensorValues weights;
  std::vector<std::unique_ptr<RecordingExchange>> exchanges;
  std::vector<double> accuracy = {-1, -1};
  std::vector<uint64_t> trained = {0, 0};

  TwoStages() {
    for (size_t t = 0; t < spec.tensors.size(); ++t) {
      const std::vector<double> u =
          ref::Uniform(spec.tensors[t].num_elements(), 30 + t, -.5, .5);
      weights.emplace_back(u.begin(), u.end());
    }
    for (int s = 0; s < 2; ++s) {
      exchanges.push_back(std::make_unique<RecordingExchange>(
          StageSpec(spec, ranges[s]), StageValues(weights, ranges[s])));
    }
  }

  // Runs both stages of `replica` of 2 for `steps` steps; replica 0
  // evaluates on `test` and saves to `save` when given.
  void Run(int replica, int steps, const LabeledImages& train,
           const LabeledImages* test, const std::string& save,
           const std::vector<Registration>& resume = {{}, {}}) {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    std::vector<Neighbours> neighbours(2);
    neighbours[0].next = std::make_unique<StageLink>(
        std::make_unique<LocalSocket>(fds[0]), LinkPeer{1, 2 * replica + 1});
    neighbours[1].previous = std::make_unique<StageLink>(
        std::make_unique<LocalSocket>(fds[1]), LinkPeer{0, 2 * replica});
    std::vector<std::thread> threads;
    for (int s = 0; s < 2; ++s) {
      threads.emplace_back([&, s] {
        auto backend = *kernels::CreateCpuBackend();
        auto stage = *nn::StageModel::Create(description, ranges[s],
                                             {kBatch, 1}, backend.get());
        PipelineTrainerOptions options;
        options.place = *PipelinePlace::FromRank(2 * replica + s, 4, 2);
        options.batch_size = kBatch;
        options.epochs = 1;
        options.max_steps = steps;
        options.evaluate = test != nullptr;
        options.save_model_path = save;
        options.whole_spec = spec;
        absl::StatusOr<std::unique_ptr<PipelineTrainer>> trainer =
            PipelineTrainer::Create(options, exchanges[s].get(), stage.get(),
                                    &neighbours[s], &train, test);
        ASSERT_TRUE(trainer.ok()) << trainer.status();
        EXPECT_EQ((*trainer)->planned_steps(), static_cast<uint64_t>(steps));
        absl::StatusOr<TrainingSummary> summary = (*trainer)->Run(resume[s]);
        ASSERT_TRUE(summary.ok()) << summary.status();
        trained[s] = summary->steps;
        accuracy[s] = summary->test_accuracy;
      });
    }
    for (std::thread& t : threads) t.join();
  }
};

// Two stages of replica 1 of 2 push, each to its own group, their
// replica's unsplit gradient for their own tensors only (ids of the stage's
// declaration), with the replica's examples and data position.
TEST(PipelineTrainerTest, EachStagePushesOnlyItsTensorsUnsplitGradient) {
  TwoStages job;
  const LabeledImages train = Data(40);
  job.Run(/*replica=*/1, /*steps=*/2, train, nullptr, "");
  EXPECT_EQ(job.trained, (std::vector<uint64_t>{2, 2}));

  // Replica 1's batches, as an unsplit rank 1 of 2 would take them.
  auto sharder = *EpochSharder::Create(40, 2, kBatch, 1);
  const EpochPlan plan = sharder.PlanEpoch(0);
  auto backend = *kernels::CreateCpuBackend();
  auto whole = *nn::CreateModel(job.description, {kBatch, 1}, backend.get());
  for (size_t t = 0; t < job.weights.size(); ++t) {
    ASSERT_TRUE(whole->SetWeights(t, job.weights[t]).ok());
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
                      want[id].assign(g.begin(), g.end());
                      return absl::OkStatus();
                    })
                    .ok());
    for (int s = 0; s < 2; ++s) {
      const RecordingExchange::Push& push = job.exchanges[s]->pushes[step];
      const nn::StageRange& range = job.ranges[s];
      EXPECT_EQ(push.info.step, static_cast<uint64_t>(step));
      EXPECT_EQ(push.info.num_examples, static_cast<uint32_t>(kBatch));
      EXPECT_EQ(push.info.cursor.examples_done,
                static_cast<uint64_t>((step + 1) * kBatch));
      ASSERT_EQ(push.gradients.size(),
                static_cast<size_t>(range.end_tensor - range.first_tensor));
      for (const auto& [id, g] : push.gradients) {
        const int whole_id = range.first_tensor + id;
        EXPECT_EQ(g, want[whole_id]) << job.spec.tensors[whole_id].name;
      }
    }
  }
}

// Replica 0's stages test through the pipeline, counting what the unsplit
// model counts, and send their weights back for rank 0 to save as the
// whole model.
TEST(PipelineTrainerTest, ReplicaZeroEvaluatesAndSavesTheWholeModel) {
  TwoStages job;
  const LabeledImages train = Data(40);
  const LabeledImages test = Data(23);  // Chunks of 6, the last of 5.
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/pipeline_trainer_test.model");
  job.Run(/*replica=*/0, /*steps=*/1, train, &test, path);

  auto backend = *kernels::CreateCpuBackend();
  auto whole = *nn::CreateModel(job.description, {kBatch, 1}, backend.get());
  for (size_t t = 0; t < job.weights.size(); ++t) {
    ASSERT_TRUE(whole->SetWeights(t, job.weights[t]).ok());
  }
  PS_ASSERT_OK_AND_ASSIGN(int64_t correct,
                          whole->Evaluate(test.images, test.labels, 23));
  EXPECT_EQ(job.accuracy[0], static_cast<double>(correct) / 23);
  EXPECT_EQ(job.accuracy[1], job.accuracy[0]);
  // The exchange's weights did not change, so the file holds them.
  PS_ASSERT_OK_AND_ASSIGN(TensorValues saved, LoadModel(path, job.spec));
  EXPECT_EQ(saved, job.weights);
}

// Stage 0's group is a step ahead of stage 1's (stage 1 died between its
// neighbour's push and its own): the replica resumes from stage 1's point,
// and both stages train the same steps.
TEST(PipelineTrainerTest, AReplicasStagesResumeFromTheEarliestGroup) {
  TwoStages job;
  const LabeledImages train = Data(40);
  Registration ahead, behind;
  ahead.next_step = 3;
  ahead.cursor.examples_done = 3 * kBatch;
  behind.next_step = 2;
  behind.cursor.examples_done = 2 * kBatch;
  job.Run(/*replica=*/0, /*steps=*/4, train, nullptr, "", {ahead, behind});
  EXPECT_EQ(job.trained, (std::vector<uint64_t>{2, 2}));
  for (int s = 0; s < 2; ++s) {
    ASSERT_EQ(job.exchanges[s]->pushes.size(), 2u) << s;
    EXPECT_EQ(job.exchanges[s]->pushes[0].info.step, 2u) << s;
    EXPECT_EQ(job.exchanges[s]->pushes[0].info.cursor.examples_done,
              3u * kBatch)
        << s;
  }
}

}  // namespace
}  // namespace ps::worker::pipeline
