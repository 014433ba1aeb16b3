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
#include "worker/pipeline/counting_backend.h"
#include "worker/pipeline/link_rendezvous.h"
#include "worker/pipeline/memory_budget.h"
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
// --pipeline_schedule and --stage_split, servers to
// hold the stages' parameters (not --local, not --mode=allreduce), and the
// links to stages on other hosts (CheckLinkRoutes: --stage_link_listen,
// --stage_link_previous, $PS_STAGE_LINK_SECRET, not with TLS).
absl::Status CheckPipelineConfig(const WorkerConfig& config, int rank);

// Refuses (InvalidArgument, memory_budget.h) a job whose workers would
// need more tensor memory than --worker_memory_budget, before anything is
// built; OK without a budget.
absl::Status CheckWorkerMemory(const WorkerConfig& config,
                               const nn::ModelDescription& description);

// Whether the worker of `rank` evaluates the test set: rank 0, and with
// --pipeline_stages every stage of replica 0 (the test goes through them).
bool EvaluatesTestSet(const WorkerConfig& config, int rank);

// The pipeline's part of a worker's run (WorkerRun calls it when
// --pipeline_stages > 1): this worker's place, its stage of the model and
// of the declaration, its server group, its links to its neighbours and
// its training loop. No rank builds the whole model. Not thread-safe; owns
// what it makes, borrows what it is given.
class StageRun {
 public:
  // Splits `description` (InvalidArgument naming --pipeline_stages when it
  // has fewer layers) and builds this rank's stage on `backend`.
  static absl::StatusOr<std::unique_ptr<StageRun>> Create(
      const WorkerConfig& config, int rank,
      const nn::ModelDescription& description, kernels::Backend* backend);

  const PipelinePlace& place() const { return place_; }
  // What this worker's tensors took, counted as its stage was built.
  const WorkerMemory& memory() const { return memory_; }
  // The stage's tensors, under the whole model's names.
  const ModelSpec& stage_spec() const { return stage_spec_; }

  // Points `options` (made for --servers, --rank and --job_id) at this
  // stage's server group: its servers (StageGroupServers), its job id
  // (StageGroupJobId) and this worker's rank there, its replica.
  // InvalidArgument when the servers do not split into the stages' groups.
  absl::Status UseStageGroup(ClientOptions* options) const;
  // Workers of the stage's group: the replicas.
  int group_workers() const { return place_.replicas; }

  // Connects to the neighbouring stages (link_rendezvous.h).
  absl::Status ConnectNeighbours(const WorkerConfig& config);

  // Makes the training loop; `test` is replica 0's, for evaluation.
  absl::Status MakeTrainer(const WorkerConfig& config, WeightExchange* weights,
                           const LabeledImages* train,
                           const LabeledImages* test);
  uint64_t planned_steps() const { return trainer_->planned_steps(); }

  // Declares the stage's tensors to its group (replica 0 declares, the
  // others must declare the same). The tensors are declared FromRank0: in a
  // new job replica 0 uploads the initial values the unsplit job's servers
  // would compute (common/initializer.h: a function of the whole model's
  // tensor id), so a pipelined job starts from the unsplit job's weights.
  absl::StatusOr<Registration> Declare(ParameterClient* client,
                                       uint64_t planned_steps,
                                       uint32_t batch_size);

  absl::StatusOr<TrainingSummary> Train(const Registration& registration) {
    return trainer_->Run(registration);
  }

 private:
  StageRun() = default;

  PipelinePlace place_;
  std::vector<nn::StageRange> ranges_;
  ModelSpec whole_spec_;  // Names, shapes and initializers only.
  ModelSpec stage_spec_;
  // The backend's count of the stage's buffers, forwarding to the worker's.
  std::unique_ptr<CountingBackend> counted_;
  std::unique_ptr<nn::StageModel> stage_;
  WorkerMemory memory_;
  Neighbours neighbours_;
  std::unique_ptr<PipelineTrainer> trainer_;
};

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_STAGE_RUN_H_
