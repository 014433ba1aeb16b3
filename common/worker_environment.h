#ifndef PS_COMMON_WORKER_ENVIRONMENT_H_
#define PS_COMMON_WORKER_ENVIRONMENT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/launch_environment.h"

namespace ps {

// Who a worker program is and where the servers are, as the launcher tells
// it through the environment (deploy/local `launch -- PROGRAM ARGS...`):
//
//   PS_RANK, PS_NUM_WORKERS      this worker's rank in [0, PS_NUM_WORKERS)
//   PS_LOCAL_RANK                its rank among the workers of this host
//   PS_LOCAL_NUM_WORKERS         how many workers this host runs
//   PS_NUM_SERVERS, PS_SERVERS   the servers' host:port, comma-separated, in
//                                index order
//   PS_SERVER_PATTERN            instead of PS_SERVERS: one address with
//                                "{index}" for 0 .. PS_NUM_SERVERS-1 (pods
//                                of a StatefulSet, deploy/k8s); the
//                                launcher sets PS_SERVERS
//   PS_JOB_ID                    the job's id, which the servers check
//                                (empty or unset: none)
//   PS_TLS_CA, PS_TLS_CERT,      paths of the authentication files and the
//   PS_TLS_KEY, PS_TOKEN_FILE,   name the servers' certificates carry (the
//   PS_TLS_SERVER_NAME           ClientOptions fields of the same names;
//                                empty or unset: none)
//
// and, for programs written for torchrun, the same as RANK, WORLD_SIZE,
// LOCAL_RANK and LOCAL_WORLD_SIZE.
struct WorkerEnvironment {
  int rank = 0;
  int num_workers = 1;
  int local_rank = 0;
  int local_num_workers = 1;
  std::vector<std::string> servers;
  std::string job_id;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;
  std::string token_file;
};

// The variables above, as (name, value) pairs to set in a child. The
// authentication ones are set even when empty, so that a child never takes
// them from the launcher's own environment.
std::vector<std::pair<std::string, std::string>> WorkerEnvironmentVariables(
    const WorkerEnvironment& environment);

// Reads the PS_ variables through `lookup` (std::getenv in a program; it
// returns nullptr for an unset variable). Where none of PS_RANK,
// PS_NUM_WORKERS, PS_LOCAL_RANK and PS_LOCAL_NUM_WORKERS is set, a task that
// `srun` or `mpirun` started takes them from the scheduler's variables
// (common/launch_environment.h), one worker per task; the servers still
// come from PS_NUM_SERVERS and PS_SERVERS, the job id from PS_JOB_ID.
//
// InvalidArgument naming every variable that is unset, at once, and how to
// set them; naming the variable when one is not a number or out of range,
// or when they disagree (a rank outside [0, PS_NUM_WORKERS), PS_NUM_SERVERS
// not the length of PS_SERVERS, a malformed address or job id); the
// scheduler's own error when its variables are half set or contradictory.
absl::StatusOr<WorkerEnvironment> ReadWorkerEnvironment(
    absl::FunctionRef<const char*(const char*)> lookup);

// For one worker per task: sets `worker`'s rank, num_workers, local_rank and
// local_num_workers from `launch`. The servers, the authentication files and
// the job id are left as they are: servers check the job id against their
// --job_id, which PS_JOB_ID tells, not the scheduler.
void ApplyLaunchEnvironment(const LaunchEnvironment& launch,
                            WorkerEnvironment* worker);

// Only the authentication variables (PS_TLS_CA, PS_TLS_CERT, PS_TLS_KEY,
// PS_TLS_SERVER_NAME, PS_TOKEN_FILE) into `environment`'s fields; unset
// ones leave theirs as they were. For a program that names the servers itself
// but runs where a launcher set these.
void ReadAuthEnvironment(absl::FunctionRef<const char*(const char*)> lookup,
                         WorkerEnvironment* environment);

}  // namespace ps

#endif  // PS_COMMON_WORKER_ENVIRONMENT_H_
