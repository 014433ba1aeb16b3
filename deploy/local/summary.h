#ifndef PS_DEPLOY_LOCAL_SUMMARY_H_
#define PS_DEPLOY_LOCAL_SUMMARY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "deploy/local/local_cluster.h"

namespace ps {

// The accuracy in a worker line such as
// "12:00:01.000 [worker 0] info: final test accuracy: 0.8912"; nullopt if the
// line has none or the value is not a number in [0, 1].
std::optional<double> ParseFinalTestAccuracy(absl::string_view line);

// What the launcher prints when the run is over: the outcome, wall time,
// final test accuracy (or that none was reported), how each process ended
// and every restart with its reason.
std::vector<std::string> SummaryLines(const ClusterResult& result);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_SUMMARY_H_
