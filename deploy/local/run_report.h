#ifndef PS_DEPLOY_LOCAL_RUN_REPORT_H_
#define PS_DEPLOY_LOCAL_RUN_REPORT_H_

#include <string>
#include <vector>

#include "deploy/local/launch_config.h"
#include "deploy/local/local_cluster.h"
#include "deploy/local/run_directory.h"
#include "deploy/local/training_progress.h"

namespace ps {

// `path` relative to `cwd` when it lies under it, for messages.
std::string ShownPath(const std::string& path, const std::string& cwd);

// Ends a run: writes its curves (with a resumed run's earlier epochs from
// its last curves.csv), sets `record`'s state and outcome and writes it, and
// returns what the launcher prints after the cluster stopped: the summary,
// the run directory, the curves and, for a run that did not finish, how to
// go on.
std::vector<std::string> FinishRun(const ClusterResult& result,
                                   const LaunchConfig& config,
                                   const std::vector<EpochRecord>& history,
                                   bool resumed, const std::string& cwd,
                                   const RunDirectory& run, RunRecord* record);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RUN_REPORT_H_
