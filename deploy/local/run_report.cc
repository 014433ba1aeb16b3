#include "deploy/local/run_report.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "deploy/local/allreduce_mode.h"
#include "deploy/local/curves.h"
#include "deploy/local/summary.h"

namespace ps {
namespace {

// What the user can do next with a run that did not finish.
std::vector<std::string> NextSteps(const ClusterResult& result,
                                   const LaunchConfig& config,
                                   const std::string& shown_dir) {
  if (result.status.ok()) {
    if (config.checkpoint_dir.empty() || !config.program.empty()) return {};
    return {absl::StrCat("to train on: --extend=", shown_dir,
                         " --epochs=N (N > ", config.epochs,
                         ", the new total)")};
  }
  // The same flags would fail the same way: the error says what to change.
  if (result.bad_configuration) return {};
  if (config.checkpoint_dir.empty()) {
    if (result.stop_signal == 0) return {};
    return {
        "this run kept no checkpoints (--nocheckpoints), so its training is "
        "lost; runs checkpoint by default and go on with --resume=DIR"};
  }
  // In allreduce mode the workers' ring checkpoints, there are no servers.
  return {absl::StrCat("go on from the ",
                       IsAllreduce(config) ? "ring's" : "servers'",
                       " last checkpoints: --resume=", shown_dir)};
}

std::string OutcomeLine(const ClusterResult& result) {
  if (result.status.ok()) {
    return result.final_test_accuracy.has_value()
               ? absl::StrFormat("final test accuracy %.4f",
                                 *result.final_test_accuracy)
               : "success";
  }
  return std::string(result.status.message());
}

}  // namespace

std::string ShownPath(const std::string& path, const std::string& cwd) {
  const std::string prefix = absl::StrCat(cwd, "/");
  return absl::StartsWith(path, prefix) ? path.substr(prefix.size()) : path;
}

std::vector<std::string> FinishRun(const ClusterResult& result,
                                   const LaunchConfig& config,
                                   const std::vector<EpochRecord>& history,
                                   bool continued, const std::string& cwd,
                                   const RunDirectory& run, RunRecord* record) {
  const std::string shown_dir = ShownPath(run.path(), cwd);
  std::vector<std::string> lines = SummaryLines(result);
  lines.push_back(
      absl::StrCat("run directory: ", shown_dir, " (logs/",
                   config.checkpoint_dir.empty() ? "" : ", checkpoints/", ")"));
  std::vector<EpochRecord> curve = history;
  if (continued && !curve.empty()) {
    // Epochs trained before are in the last segment's CSV.
    std::ifstream in(run.File("curves.csv"));
    std::stringstream earlier;
    earlier << in.rdbuf();
    if (absl::StatusOr<std::vector<EpochRecord>> parsed =
            ParseHistoryCsv(earlier.str());
        parsed.ok()) {
      curve = MergeHistory(*parsed, curve);
    }
  }
  if (!curve.empty()) {
    absl::StatusOr<CurveFiles> curves = WriteCurves(
        run.path(), curve,
        absl::StrCat(shown_dir, ": ", config.model, ", ", config.mode, ", ",
                     config.num_servers, "x", config.num_workers));
    if (!curves.ok()) {
      lines.push_back(absl::StrCat("curves: ", curves.status().message()));
    } else if (curves->png.empty()) {
      lines.push_back(absl::StrCat("curves: ", ShownPath(curves->csv, cwd),
                                   " (no picture: ", curves->png_problem, ")"));
    } else {
      lines.push_back(absl::StrCat("curves: ", ShownPath(curves->png, cwd),
                                   " (", ShownPath(curves->csv, cwd), ")"));
    }
  }
  for (const std::string& step : NextSteps(result, config, shown_dir)) {
    lines.push_back(absl::StrCat("next: ", step));
  }
  record->state = result.status.ok()        ? "finished"
                  : result.stop_signal != 0 ? "stopped"
                                            : "failed";
  record->outcome = OutcomeLine(result);
  if (!record->segments.empty()) {
    record->segments.back().end =
        absl::StrCat(record->state, ": ", record->outcome);
  }
  if (absl::Status s = run.Write(*record); !s.ok()) {
    lines.push_back(absl::StrCat("error: ", s.message()));
  }
  return lines;
}

}  // namespace ps
