#ifndef PS_DEPLOY_LOCAL_RUN_FLAGS_H_
#define PS_DEPLOY_LOCAL_RUN_FLAGS_H_

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "deploy/local/run_directory.h"

namespace ps {

// The launcher flags that define a run: recorded in its run.txt and set
// from there on --resume, where the command line must not give them.
const std::vector<std::string>& RunDefiningFlags();

// Names of the flags given in argv[1, argc) ("--name", "--name=v",
// "--noname"; stops at "--").
std::set<std::string> FlagsOnCommandLine(int argc, char** argv);

// The run-defining flags' current values; the path flags among them made
// absolute against `cwd` (where the user typed the command).
std::vector<std::pair<std::string, std::string>> CurrentRunFlags(
    const std::string& cwd);

// Sets every flag `record` holds. Fails naming the first run-defining flag
// that is also in `given`, or a recorded value that no longer parses.
absl::Status ApplyRecordedFlags(const RunRecord& record,
                                const std::set<std::string>& given);

// --help (the flags of files under `own_dir`) and --helpfull (every flag):
// the usage message, then each flag with its default and help, on stdout.
void PrintFlagHelp(bool full, const std::string& own_dir);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RUN_FLAGS_H_
