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

// Ends a run's segment: writes its curves (with a resumed or extended run's
// earlier epochs from its last curves.csv), sets `record`'s state, outcome
// and last segment's end and writes it, and returns what the launcher
// prints after the cluster stopped: the summary, the run directory, the
// curves and how to go on (--resume for a run that did not finish, --extend
// for one that did).
std::vector<std::string> FinishRun(const ClusterResult& result,
                                   const LaunchConfig& config,
                                   const std::vector<EpochRecord>& history,
                                   bool continued, const std::string& cwd,
                                   const RunDirectory& run, RunRecord* record);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RUN_REPORT_H_
