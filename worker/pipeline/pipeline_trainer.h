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
#include "worker/kill_point.h"
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
  // Replica 0's stages: evaluate the test set through the pipeline at each
  // epoch's end and at the end (rank 0 logs the accuracy).
  bool evaluate = false;
  // Replica 0's stages, all or none: at the end each sends its final
  // weights back along the links and rank 0 writes the whole model here.
  std::string save_model_path;
  // The whole model's declaration (names and shapes, for the saved file).
  ModelSpec whole_spec;
  // --test_kill_self: its step and upload moments fire in Train.
  KillPoint kill_point;
};

// The training loop of one stage of one replica. The stage's server group
// holds only its stage's tensors (declared as the exchange's model, in the
// order of the whole model's ids StageRange::first_tensor ...); the stage
// pulls them, computes their gradient with StageSchedule and pushes it, so
// the group's mean over its R replicas is the unsplit job's gradient. Each
// group runs its own mode (sync, ssp or async).
//
// Data is sharded by replica: the stages of a replica read the same batch
// (the first its images, the last its labels). Evaluation runs through the
// pipeline of replica 0: test examples forward stage to stage, the last
// stage's count of correct answers back to rank 0.
//
// A replica's stages end together: stage 0, once its part is through (its
// last push, replica 0's evaluation and saved model), tells the next stage,
// which passes it on once its own part is through; each says Done only
// then. So a stage killed at any moment before that finds its neighbours
// still there, failing on the closed link, and the restarted stages redo
// what was lost; only a stage killed after the message and before its done
// line restarts without them.
//
// Not thread-safe. Borrows everything it is given.
class PipelineTrainer {
 public:
  // `test` is needed with options.evaluate. InvalidArgument when the
  // options do not fit the data or model (and Run's when the exchange's
  // declared model is not the stage's tensors).
  static absl::StatusOr<std::unique_ptr<PipelineTrainer>> Create(
      const PipelineTrainerOptions& options, WeightExchange* weights,
      nn::StageModel* stage, Neighbours* neighbours, const LabeledImages* train,
      const LabeledImages* test);

  uint64_t planned_steps() const { return planned_steps_; }

  // Trains every planned step from the start (a job that restarts trains
  // from its servers' weights, from step 0 of its plan).
  absl::StatusOr<TrainingSummary> Run(const Registration& resume);

 private:
  PipelineTrainer(const PipelineTrainerOptions& options,
                  WeightExchange* weights, nn::StageModel* stage,
                  Neighbours* neighbours, const LabeledImages* train,
                  const LabeledImages* test, EpochSharder sharder);

  struct StepResult {
    float loss = 0;
    StepTiming timing;
    absl::Duration waited;  // For neighbours, within timing.compute.
  };
  // Run, from the replica's agreed resume point.
  absl::StatusOr<TrainingSummary> Train(const Registration& resume);
  absl::StatusOr<StepResult> Step(const EpochPlan& plan, uint64_t epoch,
                                  uint64_t step_in_epoch, uint64_t clock);
  // InvalidArgument unless the exchange's model is the stage's tensors.
  absl::Status CheckDeclaration() const;
  absl::Status SetStageWeights();
  absl::Status LoadWeights(uint64_t clock, uint64_t* version);
  // Replica 0's stages together; `tag_step` names the messages.
  absl::StatusOr<double> TestAccuracy(uint64_t tag_step);
  absl::Status SaveWholeModel(uint64_t tag_step, uint64_t version);
  // The stages of a replica resume from the earliest of their groups'
  // points (the groups' clocks differ when a stage died between its
  // neighbour's push and its own, or their checkpoints are of different
  // steps): `*resume` becomes the replica's earliest next_step and its
  // cursor. A group ahead acknowledges the repeated steps' pushes without
  // applying them again.
  absl::Status AgreeOnResume(Registration* resume);
  // Stage 0 sends the replica's end forward; each later stage waits for it
  // and passes it on (Direction::kEnd, `tag_step` the end's clock).
  absl::Status EndTogether(uint64_t tag_step);

  const PipelineTrainerOptions options_;
  WeightExchange* const exchange_;
  nn::StageModel* const stage_;
  Neighbours* const neighbours_;
  const LabeledImages* const train_;
  const LabeledImages* const test_;
  const EpochSharder sharder_;
  const uint64_t planned_steps_;
  StageSchedule schedule_;

  std::optional<uint64_t> pulled_clock_;
  uint64_t pulled_version_ = 0;
  TensorValues weights_;      // The stage's tensors, by id - first_tensor.
  std::vector<float> zeros_;  // Pushed for a replica's empty batch.
  Batch batch_;
  // Evaluation's activations in and out, a batch's worth.
  std::vector<float> eval_input_;
  std::vector<float> eval_output_;
};

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_PIPELINE_TRAINER_H_
