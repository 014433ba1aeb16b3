#ifndef PS_WORKER_WORKER_RUN_H_
#define PS_WORKER_WORKER_RUN_H_

#include "worker/worker_config.h"

namespace ps::worker {

// One worker's run, from its settings to its exit code: checks them, loads
// its share of the data and the model, connects to the servers (or, with
// --local, trains alone), registers, trains, and tells the servers it is
// done. Each failure is logged with its reason and becomes an exit code of
// common/exit_codes.h that a supervisor can act on: kExitBadConfig for the
// settings, data or model (and a mode or worker count the servers do not
// share), kExitServersLost for servers unreachable past --retry_timeout,
// kExitFailed otherwise.
//
// Not thread-safe: one thread calls Run, once.
class WorkerRun {
 public:
  // `rank` as ResolveRank resolved `config.rank`; logging is set up.
  WorkerRun(WorkerConfig config, int rank);

  // Returns the process's exit code; kExitOk when trained to the end (rank
  // 0 has then logged the final test accuracy, common/progress_line.h).
  int Run();

 private:
  const WorkerConfig config_;
  const int rank_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_WORKER_RUN_H_
