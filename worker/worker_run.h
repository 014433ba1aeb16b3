#ifndef PS_WORKER_WORKER_RUN_H_
#define PS_WORKER_WORKER_RUN_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/parameter_client.h"
#include "common/metrics_http.h"
#include "common/model_spec.h"
#include "kernels/device.h"
#include "worker/allreduce_exchange.h"
#include "worker/idx_reader.h"
#include "worker/kill_point.h"
#include "worker/local_exchange.h"
#include "worker/nn/model.h"
#include "worker/nn/model_description.h"
#include "worker/pipeline/stage_run.h"
#include "worker/trainer.h"
#include "worker/weight_exchange.h"
#include "worker/worker_config.h"
#include "worker/worker_metrics.h"

namespace ps::worker {

// One worker's run, from its settings to its exit code: checks them, loads
// its share of the data and the model, connects to the servers (or, with
// --local, trains alone; with --mode=allreduce, joins the workers' ring),
// registers, trains, and tells the servers it is done. Each failure is logged
// with its reason and becomes an exit code of common/exit_codes.h that a
// supervisor can act on: kExitBadConfig for the settings, data or model (and a
// mode or worker count the servers do not share), kExitServersLost for servers
// unreachable past --retry_timeout, kExitFailed otherwise.
//
// Not thread-safe: one thread calls Run, once. Owns everything the run
// makes (data, model, connections), until destroyed.
class WorkerRun {
 public:
  // `rank` as ResolveRank resolved `config.rank`; logging is set up.
  WorkerRun(WorkerConfig config, int rank);
  ~WorkerRun();

  // Returns the process's exit code; kExitOk when trained to the end (rank
  // 0 has then logged the final test accuracy, common/progress_line.h).
  int Run();

 private:
  // The steps of Run, in order. Each returns nullopt to go on, or the exit
  // code to end with, having logged why.
  std::optional<int> CheckSettings();
  std::optional<int> StartMetrics();
  std::optional<int> LoadDataAndModel();
  // To the servers, the local weights of --local, or the ring of
  // --mode=allreduce.
  std::optional<int> Connect();
  std::optional<int> JoinRing();
  // Declares the model and plan; checks the servers' mode and worker count.
  std::optional<int> Register();
  int Train();

  // Logs `status` with `code`; returns `code`.
  static int Fail(const absl::Status& status, int code);

  const WorkerConfig config_;
  const int rank_;
  // Filled by the steps; declared so that each is destroyed before what it
  // uses (the trainer first, the metrics endpoint last).
  std::optional<nn::ModelDescription> description_;
  std::vector<std::string> servers_;
  std::unique_ptr<MetricsEndpoint> endpoint_;
  std::unique_ptr<WorkerMetrics> metrics_;
  ModelSpec model_spec_;
  std::optional<LabeledImages> train_;
  // Rank 0's only (with stages, replica 0's: pipeline::EvaluatesTestSet).
  std::optional<LabeledImages> test_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<ParameterClient> client_;  // Null with --local.
  std::unique_ptr<LocalExchange> local_weights_;
  std::unique_ptr<WeightExchange> server_weights_;
  std::unique_ptr<AllreduceExchange> ring_weights_;  // --mode=allreduce.
  std::unique_ptr<Trainer> trainer_;
  // With --pipeline_stages above 1, in place of trainer_ and model_.
  std::unique_ptr<pipeline::StageRun> stage_run_;
  KillPoint kill_point_;  // --test_kill_self.
  Registration registration_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_WORKER_RUN_H_
