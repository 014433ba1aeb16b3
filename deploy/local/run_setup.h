#ifndef PS_DEPLOY_LOCAL_RUN_SETUP_H_
#define PS_DEPLOY_LOCAL_RUN_SETUP_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "deploy/local/launch_config.h"
#include "deploy/local/run_directory.h"
#include "deploy/local/run_flags.h"
#include "deploy/local/run_settings.h"

namespace ps {

// What a launch does with its run: start a new one, go on with a stopped or
// failed one as it is (--resume), or train one further with some flags
// changed (--extend).
enum class LaunchKind { kStart, kResume, kExtend };

// The launcher's start/resume/extend state machine, before any process
// starts: which run directory, with which settings (the command line's; on
// --resume the run's own, from run.txt; on --extend the run's with the
// changes given), and the run's record as the new segment begins.
//
// Errors are InvalidArgument when the user must change something (the
// launcher exits kExitBadConfig), other codes when something failed
// (kExitFailed); messages are for the user.
//
// Not thread-safe; the launcher's main thread owns it. It holds the run
// directory (and so its lock) until destroyed.
class RunSetup {
 public:
  // Decides the run from the command line: `settings` as parsed (with
  // --resume, --extend and --run_dir among them), `given` the flags on it,
  // `program` the argv after "--", `cwd` where the user typed it. For
  // --resume and --extend, opens the run and refuses what cannot be resumed
  // or extended; for a start, only decides the path (`now` names a new run).
  static absl::StatusOr<RunSetup> Plan(RunSettings settings,
                                       const std::set<std::string>& given,
                                       std::vector<std::string> program,
                                       const std::string& cwd, absl::Time now);

  RunSetup(RunSetup&&) = default;
  RunSetup& operator=(RunSetup&&) = default;

  LaunchKind kind() const { return kind_; }
  // Absolute.
  const std::string& path() const { return path_; }
  // The run's settings: give them to ConfigFromSettings.
  const RunSettings& settings() const { return settings_; }
  const std::vector<std::string>& program() const { return program_; }
  // --extend's changes, in the order of RunDefiningFlags.
  const std::vector<FlagChange>& changes() const { return changes_; }
  // Whether the servers restore with --extend: this launch extends the run,
  // or an earlier one did.
  bool extended() const;

  // Begins the launch's segment for `config` (made from settings()): an
  // extension first keeps the checkpoints from before in
  // checkpoints/before-segment-N/ (kept_dir()); a new run gets its
  // directory. Then run.txt gets the new segment, state running.
  absl::Status Begin(const LaunchConfig& config, absl::Time now);
  // For --extend after Begin: where the checkpoints from before are.
  const std::string& kept_dir() const { return kept_dir_; }

  // What the launcher says first: "run DIR: 2 servers, 2 workers, sync, 10
  // epochs of MODEL (logs in DIR/logs/)", and for an extension the flags it
  // changes. After Begin.
  std::vector<std::string> OpeningLines(const LaunchConfig& config) const;

  // After Begin: the run's directory and record, for FinishRun.
  const RunDirectory& dir() const { return *dir_; }
  RunRecord* record() { return &record_; }

 private:
  RunSetup() = default;

  // Opens the run --resume or --extend names.
  absl::Status Open(const std::string& flag, const std::set<std::string>& given,
                    std::vector<std::string> program);

  LaunchKind kind_ = LaunchKind::kStart;
  std::string cwd_;
  std::string path_;
  RunSettings settings_;
  std::vector<std::string> program_;
  std::vector<FlagChange> changes_;
  std::unique_ptr<RunDirectory> dir_;  // Null for a start before Begin.
  RunRecord record_;
  std::string kept_dir_;
};

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RUN_SETUP_H_
