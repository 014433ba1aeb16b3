#ifndef PS_DEPLOY_LOCAL_CURVES_H_
#define PS_DEPLOY_LOCAL_CURVES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deploy/local/training_progress.h"

namespace ps {

// The files a run's curves go to, in its directory.
struct CurveFiles {
  std::string csv;  // Always written (if the history is not empty).
  std::string png;  // Empty when it could not be drawn.
  // Why there is no PNG, e.g. gnuplot is missing; empty otherwise.
  std::string png_problem;
};

// Writes DIR/curves.csv (HistoryCsv) and plots it to DIR/curves.png with
// gnuplot (Debian's gnuplot-nox): training loss and test accuracy by epoch,
// the gnuplot script kept as DIR/curves.gp. Fails only when the CSV cannot
// be written or the history is empty.
absl::StatusOr<CurveFiles> WriteCurves(const std::string& dir,
                                       const std::vector<EpochRecord>& history,
                                       const std::string& title);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_CURVES_H_
