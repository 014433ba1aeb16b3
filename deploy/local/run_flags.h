#ifndef PS_DEPLOY_LOCAL_RUN_FLAGS_H_
#define PS_DEPLOY_LOCAL_RUN_FLAGS_H_

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "deploy/local/run_directory.h"
#include "deploy/local/run_settings.h"

namespace ps {

// The launcher flags that define a run: recorded in its run.txt and set
// from there on --resume, where the command line must not give them.
const std::vector<std::string>& RunDefiningFlags();

// Names of the flags given in argv[1, argc) ("--name", "--name=v",
// "--noname"; stops at "--").
std::set<std::string> FlagsOnCommandLine(int argc, char** argv);

// The run-defining flags' values in `settings`; the path flags among them
// made absolute against `cwd` (where the user typed the command).
std::vector<std::pair<std::string, std::string>> CurrentRunFlags(
    const RunSettings& settings, const std::string& cwd);

// Sets in `settings` every flag `record` holds (CurrentFlags: as its last
// extension left them). Fails naming the first run-defining flag that is
// also in `given`, or a recorded value that no longer parses.
absl::Status ApplyRecordedFlags(const RunRecord& record,
                                const std::set<std::string>& given,
                                RunSettings* settings);

// Why a run-defining flag keeps its value when the run is extended, e.g.
// "the checkpoints hold the run's model"; nullptr for the flags an
// extension may change (--epochs, --max_steps, --learning_rate,
// --lr_schedule, --log_every, --eval_every, --save_model, --device, --auth,
// --server_flags, --worker_flags).
const char* WhyFixedOnExtend(absl::string_view name);

// A run-defining flag an extension changes.
struct FlagChange {
  std::string name;
  std::string from;  // The run's value.
  std::string to;
};

// For --extend: sets in `settings` every flag `record` holds, then the
// run-defining flags in `given` (their command-line values, which `settings`
// holds on entry, paths made absolute against `cwd`) that differ from the
// run's, and returns those. InvalidArgument naming the flag and why when one
// of them may not change (WhyFixedOnExtend); a flag given with the run's own
// value is no change.
absl::StatusOr<std::vector<FlagChange>> ApplyExtension(
    const RunRecord& record, const std::set<std::string>& given,
    const std::string& cwd, RunSettings* settings);

// Whether `changes` make an extension of a run in `state` whose flags were
// `before`: it must change something, and a finished run must plan more
// training (more --epochs, or a --max_steps above the one it stopped at, or
// 0). InvalidArgument saying what to give otherwise; `shown_dir` names the
// run.
absl::Status CheckExtension(
    const std::string& state,
    const std::vector<std::pair<std::string, std::string>>& before,
    const std::vector<FlagChange>& changes, const std::string& shown_dir);

// --help (the flags of files under `own_dir`) and --helpfull (every flag):
// the usage message, then each flag with its default and help, on stdout.
void PrintFlagHelp(bool full, const std::string& own_dir);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RUN_FLAGS_H_
