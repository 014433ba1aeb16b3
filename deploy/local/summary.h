#ifndef PS_DEPLOY_LOCAL_SUMMARY_H_
#define PS_DEPLOY_LOCAL_SUMMARY_H_

#include <string>
#include <vector>

#include "deploy/local/local_cluster.h"

namespace ps {

// What the launcher prints when the run is over: the outcome, wall time,
// final test accuracy (or that none was reported), how each process ended
// and every restart with its reason.
std::vector<std::string> SummaryLines(const ClusterResult& result);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_SUMMARY_H_
