#include "deploy/local/binary_locator.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps {
namespace {

// Must match the workspace() name in WORKSPACE: runfiles live under it.
constexpr absl::string_view kWorkspaceName = "paramserver";
// The launcher's own path inside bazel-bin.
constexpr absl::string_view kLauncherPath = "/deploy/local/launch";

bool IsExecutableFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

void AddCandidates(const std::string& launcher, absl::string_view path,
                   std::vector<std::string>* out) {
  if (launcher.empty() || launcher.find('/') == std::string::npos) return;
  out->push_back(
      absl::StrCat(launcher, ".runfiles/", kWorkspaceName, "/", path));
  if (absl::EndsWith(launcher, kLauncherPath)) {
    const absl::string_view bin_root = absl::string_view(launcher).substr(
        0, launcher.size() - kLauncherPath.size());
    out->push_back(absl::StrCat(bin_root, "/", path));
  }
}

}  // namespace

std::string ResolveUserPath(const std::string& path,
                            const std::string& build_working_directory) {
  if (path.empty() || path[0] == '/' || build_working_directory.empty()) {
    return path;
  }
  return absl::StrCat(build_working_directory, "/", path);
}

std::vector<std::string> BinaryCandidates(const LauncherLocation& location,
                                          absl::string_view workspace_path) {
  std::vector<std::string> candidates;
  if (!location.runfiles_dir.empty()) {
    candidates.push_back(absl::StrCat(location.runfiles_dir, "/",
                                      kWorkspaceName, "/", workspace_path));
  }
  AddCandidates(location.self_exe, workspace_path, &candidates);
  AddCandidates(location.argv0, workspace_path, &candidates);
  std::vector<std::string> unique;
  for (std::string& candidate : candidates) {
    if (std::find(unique.begin(), unique.end(), candidate) == unique.end()) {
      unique.push_back(std::move(candidate));
    }
  }
  return unique;
}

absl::StatusOr<std::string> FindSiblingBinary(const LauncherLocation& location,
                                              absl::string_view workspace_path,
                                              absl::string_view target,
                                              absl::string_view flag_name) {
  const std::vector<std::string> candidates =
      BinaryCandidates(location, workspace_path);
  for (const std::string& candidate : candidates) {
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot find the ", workspace_path, " binary (looked at: ",
      candidates.empty() ? "nothing" : absl::StrJoin(candidates, ", "),
      "); build it with `bazel build ", target, "` or pass --", flag_name));
}

absl::Status CheckExecutable(absl::string_view flag_name,
                             const std::string& path) {
  if (IsExecutableFile(path)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag_name, "=", path, " is not an executable file"));
}

}  // namespace ps
