#include "deploy/local/summary.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {

std::vector<std::string> SummaryLines(const ClusterResult& result) {
  std::vector<std::string> lines;
  lines.push_back("---- summary ----");
  if (result.status.ok()) {
    lines.push_back("result: success");
  } else if (result.stop_signal != 0) {
    lines.push_back(absl::StrCat("result: stopped, ", result.status.message()));
  } else {
    lines.push_back(absl::StrCat("result: FAILED: ", result.status.message()));
  }
  lines.push_back(
      absl::StrCat("wall time: ", absl::FormatDuration(absl::Trunc(
                                      result.elapsed, absl::Milliseconds(1)))));
  if (result.final_test_accuracy.has_value()) {
    lines.push_back(absl::StrFormat("final test accuracy: %.4f",
                                    *result.final_test_accuracy));
  } else {
    lines.push_back("final test accuracy: not reported by worker 0");
  }
  for (const ProcessOutcome& process : result.processes) {
    std::string how = "never started";
    if (process.exit.has_value()) {
      how = process.exit->ToString();
      if (process.stopped_by_launcher) {
        absl::StrAppend(&how, " (stopped by the launcher)");
      }
      if (process.finished_before_exit) {
        absl::StrAppend(&how, " (after its done line: finished)");
      }
    }
    lines.push_back(absl::StrCat(process.name, ": ", how));
  }
  if (result.restarts.empty()) {
    lines.push_back(absl::StrCat(
        "restarts: none (--max_restarts=", result.max_restarts, ")"));
  } else {
    lines.push_back(absl::StrCat("restarts: ", result.restarts.size(),
                                 " of --max_restarts=", result.max_restarts));
    for (const RestartRecord& restart : result.restarts) {
      lines.push_back(absl::StrCat(
          "  ", restart.name, " at ",
          absl::FormatDuration(absl::Trunc(restart.at, absl::Seconds(1))),
          ", after ", absl::FormatDuration(restart.delay), ": ",
          restart.reason));
    }
  }
  for (const std::string& note : result.notes) {
    lines.push_back(absl::StrCat("note: ", note));
  }
  return lines;
}

}  // namespace ps
