#ifndef PS_TESTS_SYNC_EQUIVALENCE_H_
#define PS_TESTS_SYNC_EQUIVALENCE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/model_spec.h"
#include "deploy/local/launch_config.h"
#include "tests/exact_sgd_step.h"
#include "worker/dataset.h"

namespace ps::testing {

// Every kind of layer the CNN preset has, small enough that a step of the
// double-precision reference takes milliseconds: 1,554 weights.
inline constexpr char kSmallCnnModel[] =
    "input 1x28x28; conv 4 5x5 stride 2; relu; maxpool 2; flatten; "
    "dropout 0.25; dense 10";

// SmallJob() as plain SGD at a constant rate, so that the weights are the
// whole state a step starts from and its rate does not depend on the
// planned steps: `num_workers` workers at `batch_size` for `max_steps`
// steps of `model`, worker 0 saving the result to `save_model`.
LaunchConfig PlainSgdJob(const std::string& model, int num_servers,
                         int num_workers, int batch_size, int max_steps,
                         const std::string& save_model);

// "2 workers at batch b train like 1 worker at batch 2b", step by step: each
// of `steps` steps of each run, taken from the weights the run had before
// it, must land within what float32 rounding can do of the same step in
// exact arithmetic (`exact_step`), on any CPU and BLAS kernel. A sync run
// is bit-identical up to step t - 1 whether it stops there or at t, so the
// weights before step t are those of a run stopped at t - 1.
//
// The aggregation mistakes a server could make must each put at least
// `mistake_share_outside` of the weights outside the bound at every step
// of the 2-worker run, or the check would prove nothing.
struct SyncEquivalence {
  std::string model;  // The --model flag.
  ModelSpec spec;     // What it declares, with SmallJob()'s seed.
  int steps = 25;
  int batch_size = 32;  // Per worker of two; one worker gets twice that.
  double mistake_share_outside = 0.001;
  // The launcher's --mode for both runs: "sync" through the servers, or
  // "allreduce" (the workers' ring).
  std::string mode = "sync";
  // The runs checked, each step by step; empty: 2 workers at batch_size,
  // then 1 worker at twice that. A run of pipeline_stages K > 1 has
  // workers / K replicas at batch_size each.
  struct Run {
    int workers = 2;
    int batch_size = 32;
    int pipeline_stages = 1;
    int micro_batches = 1;
  };
  std::vector<Run> runs;
  // Added to both runs' workers (e.g. --compression=bf16).
  std::vector<std::string> worker_flags;
  // The exact step `step` (1-based) from `before` on the global batch that
  // 2 workers at batch_size split as `ranks`.
  std::function<ExactStep(
      const std::vector<std::vector<float>>& before, float learning_rate,
      int step, absl::Span<const worker::Batch> ranks, Aggregation aggregation)>
      exact_step;
};

// Runs both jobs, step by step, checking each; prints each step's worst
// |w - exact| / bound per tensor and each run's worst overall.
void ExpectTwoWorkersTrainLikeOne(const SyncEquivalence& check);

}  // namespace ps::testing

#endif  // PS_TESTS_SYNC_EQUIVALENCE_H_
