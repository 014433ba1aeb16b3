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
// so a replica's stages are consecutive ranks; on several hosts each host
// runs a block of them, and the links that cross hosts go over TCP
// (stage_links.h).
//
// With our worker, each stage's parameters live on a server group of their
// own: K groups of --num_servers shards, each a job of its own (job id
// "<job>-stage<s>", checkpoints in <checkpoint_dir>/stage<s>, its own
// ports and report files), whose workers are the stage's R replicas. The
// launcher numbers the servers of all groups in stage order (server
// s x num_servers + shard: logs/server-<n>.log) and gives every worker all
// of them; a worker picks its stage's group. A program's stages share one
// group, which holds the whole model.

// InvalidArgument naming the flags: K < 1, --num_workers not a multiple of
// K, M outside [1, --batch_size] or not dividing it, M > 1 without K > 1;
// and for our worker binary with K > 1, more stages than --model has
// layers, an unknown --pipeline_schedule or --stage_split, or
// --mode=allreduce (the stages' parameters live on servers).
// Also --worker_memory_budget (any K): a value that does not parse, a
// program's (ours only), and a job whose workers would not fit it
// (worker/pipeline/memory_budget.h, the workers' own check).
absl::Status CheckPipelineConfig(const LaunchConfig& config);

// The worker binary's flags for it: none when K is 1.
std::vector<std::string> PipelineWorkerFlags(const LaunchConfig& config);

// For every worker process, a program after -- included, when K > 1:
// PS_PIPELINE_STAGES=K and PS_MICRO_BATCHES=M.
std::vector<std::pair<std::string, std::string>> PipelineEnvironment(
    const LaunchConfig& config);

// K server groups for our worker with K > 1, else 1.
int ServerGroups(const LaunchConfig& config);
// Server processes of the whole job: --num_servers x ServerGroups.
int TotalServers(const LaunchConfig& config);
// Whether worker `rank` takes part in saving the model (--save_model):
// rank 0, and with server groups every stage of replica 0, whose weights
// go back to rank 0 along the links.
bool SavesModel(const LaunchConfig& config, int rank);

// What server process `index` (of TotalServers) is in its group.
struct ServerGroup {
  int stage = 0;
  int shard = 0;    // Its --server_index.
  int shards = 1;   // Its --num_servers.
  int workers = 1;  // Its --num_workers.
  std::string job_id;
  std::string checkpoint_dir;  // Empty: none.
};
ServerGroup ServerGroupOf(const LaunchConfig& config, int index);

// Where stage `stage`'s group keeps its checkpoints.
std::string StageCheckpointDir(const std::string& checkpoint_dir, int stage);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_PIPELINE_MODE_H_
