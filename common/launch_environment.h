#ifndef PS_COMMON_LAUNCH_ENVIRONMENT_H_
#define PS_COMMON_LAUNCH_ENVIRONMENT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

// Who a process is in a job that a cluster's scheduler started, from the
// variables the scheduler sets for each task:
//
//   Slurm (srun)                 Open MPI (mpirun)
//   SLURM_PROCID                 OMPI_COMM_WORLD_RANK         rank
//   SLURM_NTASKS                 OMPI_COMM_WORLD_SIZE         num_tasks
//   SLURM_LOCALID                OMPI_COMM_WORLD_LOCAL_RANK   local_rank
//   SLURM_STEP_TASKS_PER_NODE    OMPI_COMM_WORLD_LOCAL_SIZE   local_num_tasks
//     (this node's count)
//   SLURM_NODEID                 -                            node_rank
//   SLURM_NNODES                 -                            num_nodes
//   SLURM_STEP_NODELIST          -                            nodes
//     (expanded: slurm_lists.h)
//   SLURM_JOB_ID                 -                            job_id
//
// Open MPI does not tell a node's index: its OMPI_COMM_WORLD_NODE_RANK is
// the process's rank among the processes of all jobs on its node (the local
// rank, for a job that spawns none), so it is not read.
enum class Scheduler { kSlurm, kOpenMpi };

// "Slurm" or "Open MPI".
const char* SchedulerName(Scheduler scheduler);

struct LaunchEnvironment {
  Scheduler scheduler = Scheduler::kSlurm;
  int rank = 0;  // In [0, num_tasks).
  int num_tasks = 1;
  int local_rank = 0;  // Among this node's tasks: [0, local_num_tasks).
  int local_num_tasks = 1;
  // Slurm only: this node's index in `nodes`, and its length. Under Open
  // MPI: -1, 0 and empty.
  int node_rank = -1;
  int num_nodes = 0;
  std::vector<std::string> nodes;
  std::string job_id;  // Slurm only; a valid --job_id (cluster_address.h).
};

// Reads the variables through `lookup` (std::getenv in a program; nullptr
// for an unset variable).
//
// nullopt when no scheduler started this process: none of either column's
// variables is set. Open MPI when one of its variables is set, even if
// Slurm's are too (mpirun inside a Slurm allocation is common, and its
// processes inherit the batch step's SLURM_ variables); Slurm otherwise.
//
// InvalidArgument, never a guess, naming at once every variable of that
// scheduler that is unset, not a number, or out of range, and every pair
// that contradicts each other (a rank outside [0, num_tasks), a node list
// whose length is not SLURM_NNODES, task counts that do not add up to
// SLURM_NTASKS, ...). A Slurm batch script itself (sbatch without srun)
// lacks the step's variables: the message says to start tasks with srun.
absl::StatusOr<std::optional<LaunchEnvironment>> ReadLaunchEnvironment(
    absl::FunctionRef<const char*(const char*)> lookup);

}  // namespace ps

#endif  // PS_COMMON_LAUNCH_ENVIRONMENT_H_
