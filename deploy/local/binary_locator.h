#ifndef PS_DEPLOY_LOCAL_BINARY_LOCATOR_H_
#define PS_DEPLOY_LOCAL_BINARY_LOCATOR_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// Where the launcher itself is, as main() learns it. The launcher runs as
// `bazel run //deploy/local:launch` (cwd: its runfiles tree) or directly as
// bazel-bin/deploy/local/launch (cwd: anywhere).
struct LauncherLocation {
  std::string self_exe;      // /proc/self/exe, symlinks resolved.
  std::string argv0;         // As invoked.
  std::string runfiles_dir;  // $RUNFILES_DIR, empty if unset.
};

// Makes a user-given relative path absolute against the directory the user
// ran from: $BUILD_WORKING_DIRECTORY under `bazel run` (whose cwd is the
// runfiles tree), else left as is. Empty stays empty.
std::string ResolveUserPath(const std::string& path,
                            const std::string& build_working_directory);

// Where a workspace binary such as "server/server" may be, in search order:
// the launcher's runfiles, then the bazel-bin tree it was built in.
std::vector<std::string> BinaryCandidates(const LauncherLocation& location,
                                          absl::string_view workspace_path);

// The first candidate that is an executable file. NotFound otherwise, listing
// where it looked and telling to build `target` or pass `--flag_name`.
absl::StatusOr<std::string> FindSiblingBinary(const LauncherLocation& location,
                                              absl::string_view workspace_path,
                                              absl::string_view target,
                                              absl::string_view flag_name);

// OK if `path` (given by --`flag_name`) is an executable file.
absl::Status CheckExecutable(absl::string_view flag_name,
                             const std::string& path);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_BINARY_LOCATOR_H_
