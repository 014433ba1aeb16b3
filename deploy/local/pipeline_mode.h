#ifndef PS_DEPLOY_LOCAL_PIPELINE_MODE_H_
#define PS_DEPLOY_LOCAL_PIPELINE_MODE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "deploy/local/launch_config.h"

namespace ps {

// --pipeline_stages=K (with --micro_batches=M) in the local launcher: each
// of the --num_workers = R x K workers trains one stage of one of R
// replicas (worker/pipeline/pipeline_place.h: rank = replica x K + stage),
// so a replica's stages are consecutive ranks on one host. The servers, the
// checkpoints, --extend and predict see the whole model as ever.

// InvalidArgument naming the flags: K < 1, --num_workers not a multiple of
// K, M outside [1, --batch_size] or not dividing it, M > 1 without K > 1;
// and for our worker binary with K > 1, more stages than --model has
// layers, an unknown --pipeline_schedule or --stage_split, or a --mode
// other than sync (a stage
// pushes zeros for the others' tensors, which only a sync step averages
// away).
absl::Status CheckPipelineConfig(const LaunchConfig& config);

// The worker binary's flags for it: none when K is 1.
std::vector<std::string> PipelineWorkerFlags(const LaunchConfig& config);

// For every worker process, a program after -- included, when K > 1:
// PS_PIPELINE_STAGES=K and PS_MICRO_BATCHES=M.
std::vector<std::pair<std::string, std::string>> PipelineEnvironment(
    const LaunchConfig& config);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_PIPELINE_MODE_H_
