#ifndef PS_WORKER_PIPELINE_PIPELINE_TRAINER_H_
#define PS_WORKER_PIPELINE_PIPELINE_TRAINER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/parameter_client.h"
#include "worker/dataset.h"
#include "worker/idx_reader.h"
#include "worker/nn/model.h"
#include "worker/nn/stage_model.h"
#include "worker/pipeline/link_rendezvous.h"
#include "worker/pipeline/pipeline_place.h"
#include "worker/pipeline/schedule_action.h"
#include "worker/pipeline/stage_schedule.h"
#include "worker/trainer.h"
#include "worker/weight_exchange.h"

namespace ps::worker::pipeline {

struct PipelineTrainerOptions {
  PipelinePlace place;
  // Examples per step of a replica, cut into `micro_batches`.
  int batch_size = 64;
  int micro_batches = 1;
  ScheduleKind schedule = ScheduleKind::kGpipe;
  int epochs = 10;
  uint64_t seed = 1;
  uint64_t max_steps = 0;
  int log_every = 100;
  // Rank 0's: evaluates the whole model (`whole`) at each epoch's end and
  // at the end, and writes the final model to save_model_path when set.
  bool evaluate = false;
  std::string save_model_path;
};

// The training loop of one stage of one replica. Every rank of the job
// declares the whole model (the tensors of every stage, under the whole
// model's names) and pulls it, as an unsplit worker does; it computes its
// stage's gradient with StageSchedule and pushes it for its stage's tensors,
// K times over, and zeros for the others': the servers average a sync
// step's K x R pushes weighted by examples, so each tensor gets the mean of
// its own stage's R replicas, the unsplit job's gradient (scaling by a
// power of two K is exact in float). This needs sync mode: in ssp and async
// every push is a step of its own, and the zeros would be steps too
// (Create's caller checks the servers' mode).
//
// Data is sharded by replica: the stages of a replica read the same batch
// (the first its images, the last its labels).
//
// Not thread-safe. Borrows everything it is given.
class PipelineTrainer {
 public:
  // `whole` is rank 0's model for evaluation (null elsewhere); `test` is
  // needed with options.evaluate. InvalidArgument when the options do not
  // fit the data or model.
  static absl::StatusOr<std::unique_ptr<PipelineTrainer>> Create(
      const PipelineTrainerOptions& options, WeightExchange* weights,
      nn::StageModel* stage, Neighbours* neighbours, nn::Model* whole,
      const LabeledImages* train, const LabeledImages* test);

  uint64_t planned_steps() const { return planned_steps_; }

  // Trains every planned step from the start (a job that restarts trains
  // from its servers' weights, from step 0 of its plan).
  absl::StatusOr<TrainingSummary> Run(const Registration& resume);

 private:
  PipelineTrainer(const PipelineTrainerOptions& options,
                  WeightExchange* weights, nn::StageModel* stage,
                  Neighbours* neighbours, nn::Model* whole,
                  const LabeledImages* train, const LabeledImages* test,
                  EpochSharder sharder);

  struct StepResult {
    float loss = 0;
    StepTiming timing;
    absl::Duration waited;  // For neighbours, within timing.compute.
  };
  absl::StatusOr<StepResult> Step(const EpochPlan& plan, uint64_t epoch,
                                  uint64_t step_in_epoch, uint64_t clock);
  absl::Status LoadWeights(uint64_t clock, uint64_t* version);
  absl::StatusOr<double> TestAccuracy();

  const PipelineTrainerOptions options_;
  WeightExchange* const exchange_;
  nn::StageModel* const stage_;
  nn::Model* const whole_;
  const LabeledImages* const train_;
  const LabeledImages* const test_;
  const EpochSharder sharder_;
  const uint64_t planned_steps_;
  StageSchedule schedule_;

  std::optional<uint64_t> pulled_clock_;
  uint64_t pulled_version_ = 0;
  TensorValues weights_;
  // What the push sends: this stage's gradients times K, zeros elsewhere.
  TensorValues push_;
  Batch batch_;
};

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_PIPELINE_TRAINER_H_
