#ifndef PS_WORKER_PIPELINE_STAGE_RUN_H_
#define PS_WORKER_PIPELINE_STAGE_RUN_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/parameter_client.h"
#include "kernels/backend.h"
#include "worker/idx_reader.h"
#include "worker/nn/model.h"
#include "worker/nn/model_description.h"
#include "worker/nn/stage_model.h"
#include "worker/nn/stage_split.h"
#include "worker/pipeline/link_rendezvous.h"
#include "worker/pipeline/pipeline_place.h"
#include "worker/pipeline/pipeline_trainer.h"
#include "worker/pipeline/schedule_action.h"
#include "worker/trainer.h"
#include "worker/weight_exchange.h"
#include "worker/worker_config.h"

namespace ps::worker::pipeline {

// Checks the pipeline flags of `config` for the worker of `rank`, naming
// the flag at fault (InvalidArgument): --pipeline_stages at least 1 and
// dividing --num_workers, --micro_batches in [1, --batch_size] and dividing
// it (every micro-batch of a full batch the same size), a known
// --pipeline_schedule and --stage_split, and servers to
// hold the stages' parameters (not --local, not --mode=allreduce, and not
// --mode=ssp or async: see PipelineTrainer).
absl::Status CheckPipelineConfig(const WorkerConfig& config, int rank);

// The pipeline's part of a worker's run (WorkerRun calls it when
// --pipeline_stages > 1): this worker's place, its stage of the model, its
// links to its neighbours and its training loop. Not thread-safe; owns
// what it makes, borrows what it is given.
class StageRun {
 public:
  // Splits `description` (InvalidArgument naming --pipeline_stages when it
  // has fewer layers) and builds this rank's stage on `backend`.
  static absl::StatusOr<std::unique_ptr<StageRun>> Create(
      const WorkerConfig& config, int rank,
      const nn::ModelDescription& description, kernels::Backend* backend);

  const PipelinePlace& place() const { return place_; }

  // Connects to the neighbouring stages (link_rendezvous.h).
  absl::Status ConnectNeighbours(const WorkerConfig& config);

  // Makes the training loop; `whole` and `test` are rank 0's, for
  // evaluation.
  absl::Status MakeTrainer(const WorkerConfig& config, WeightExchange* weights,
                           nn::Model* whole, const LabeledImages* train,
                           const LabeledImages* test);
  uint64_t planned_steps() const { return trainer_->planned_steps(); }

  // FailedPrecondition unless the servers run sync mode.
  static absl::Status CheckMode(const Registration& registration);

  absl::StatusOr<TrainingSummary> Train(const Registration& registration) {
    return trainer_->Run(registration);
  }

 private:
  StageRun() = default;

  PipelinePlace place_;
  std::vector<nn::StageRange> ranges_;
  std::unique_ptr<nn::StageModel> stage_;
  Neighbours neighbours_;
  std::unique_ptr<PipelineTrainer> trainer_;
};

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_STAGE_RUN_H_
