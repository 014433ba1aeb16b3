#ifndef PS_WORKER_TRAINER_H_
#define PS_WORKER_TRAINER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/parameter_client.h"
#include "common/consistency_mode.h"
#include "worker/dataset.h"
#include "worker/idx_reader.h"
#include "worker/nn/model.h"
#include "worker/weight_exchange.h"
#include "worker/worker_metrics.h"

namespace ps::worker {

struct TrainerOptions {
  int rank = 0;
  int num_workers = 1;
  int batch_size = 64;
  int epochs = 10;
  // Seeds the data shuffle; every worker must use the same one.
  uint64_t seed = 1;
  // Stop after this many steps in all (0: train every epoch to the end).
  uint64_t max_steps = 0;
  // Progress line every this many steps, on every rank: each worker's own
  // log (a pod's, say) shows where that worker is.
  int log_every = 100;
  // Rank 0 evaluates on the test set at each epoch's end and at the end.
  bool evaluate = false;
  // With `evaluate`, also every this many steps (0: only per epoch).
  int eval_every = 0;
  // Rank 0 writes the final model here when set.
  std::string save_model_path;
  // Sleeps this long every step, between its push and its next pull: slows
  // one worker on purpose (experiments). Such a worker pulls with a call of
  // its own after the sleep instead of taking weights with its push.
  absl::Duration slowdown = absl::ZeroDuration();
  // Where steps, loss and accuracy are also counted for Prometheus; null:
  // nowhere. Not owned.
  WorkerMetrics* metrics = nullptr;
};

struct TrainingSummary {
  uint64_t steps = 0;
  uint64_t examples = 0;
  double final_loss = 0;
  // Set when options.evaluate: accuracy on the test set after training.
  double test_accuracy = -1;
  absl::Duration wall_time;
  // The steps' time by phase, summed (evaluations are not in it).
  StepTiming step_time;
};

// The training loop of one worker: pull weights, compute the gradient of its
// shard of the batch, push it, over every step of every epoch. A step's push
// brings back the next step's weights on the same calls (pull_after), so a
// step makes one call per shard.
//
// The model is any nn::Model (an MLP, a CNN, ...): the trainer only sets its
// weights, runs it forward and backward, and evaluates it. Pushes overlap the
// backward pass: each tensor's gradient is queued to the shards as soon as
// the model reports it, last layer first. Not thread-safe; one
// trainer per worker process. Borrows everything it is given.
class Trainer {
 public:
  // Fails if the options do not fit the data (e.g. batch size, workers).
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const TrainerOptions& options, WeightExchange* weights, nn::Model* model,
      const LabeledImages* train, const LabeledImages* test);

  // Batches this worker trains in all; every rank plans the same number.
  uint64_t planned_steps() const { return planned_steps_; }

  // Trains from where `resume` says this rank stands (a new job starts at
  // clock 0, epoch 0, no examples done) to the end of the last epoch. With
  // servers, their client's model must be declared (`resume` is what
  // Declare returned).
  absl::StatusOr<TrainingSummary> Run(const Registration& resume);

 private:
  struct StepResult {
    float loss = 0;
    // The clock the gradient was pushed for.
    uint64_t clock = 0;
    // The shards refused the push as stale: the step completed without
    // this worker, and the batch is still to be trained.
    bool stale = false;
    StepTiming timing;
  };

  Trainer(const TrainerOptions& options, WeightExchange* weights,
          nn::Model* model, const LabeledImages* train,
          const LabeledImages* test, EpochSharder sharder);

  // One step: pull for `clock`, compute the gradient of this rank's share of
  // batch `step_in_epoch`, push it, for the step NextPushClock(mode, ...)
  // says (common/consistency_mode.h).
  absl::StatusOr<StepResult> Step(const EpochPlan& plan, uint64_t epoch,
                                  uint64_t step_in_epoch, uint64_t clock,
                                  ConsistencyMode mode);
  // Puts the weights for `clock` into the model: those the last step's
  // push brought back if they are for `clock`, else pulled.
  absl::Status LoadWeights(uint64_t clock, uint64_t* version);
  // Puts weights_ into the model.
  absl::Status SetModelWeights();
  // Accuracy of the model's current weights on the test set.
  absl::StatusOr<double> TestAccuracy();

  const TrainerOptions options_;
  WeightExchange* const exchange_;
  nn::Model* const model_;
  const LabeledImages* const train_;
  const LabeledImages* const test_;
  const EpochSharder sharder_;
  const uint64_t planned_steps_;

  // What `weights_` holds after a step whose push brought weights back.
  struct PulledWeights {
    uint64_t clock = 0;
    uint64_t version = 0;
  };
  std::optional<PulledWeights> pulled_;

  // Buffers reused across steps.
  TensorValues weights_;
  // Zeros, pushed for an empty share of a batch.
  TensorValues zero_gradients_;
  Batch batch_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_TRAINER_H_
