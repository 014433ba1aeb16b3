#ifndef PS_DEPLOY_LOCAL_CONFIG_FROM_SETTINGS_H_
#define PS_DEPLOY_LOCAL_CONFIG_FROM_SETTINGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deploy/local/binary_locator.h"
#include "deploy/local/launch_config.h"
#include "deploy/local/run_settings.h"

namespace ps {

// The launch a run's settings (RunSetup::settings(): the launcher's flags,
// or a resumed run's) describe, checked (ValidateLaunchConfig) before
// anything starts: paths made absolute against `cwd`, the server and worker
// binaries found (the flags', or next to the launcher at `location`), the
// checkpoints in `run_dir`/checkpoints unless --checkpoint_dir or
// --nocheckpoints, a new job id unless --job_id. `program` is the argv after
// "--" (then no flag of our worker binary may be set). InvalidArgument or
// NotFound naming the flag at fault.
absl::StatusOr<LaunchConfig> ConfigFromSettings(
    const RunSettings& settings, const LauncherLocation& location,
    const std::string& cwd, std::vector<std::string> program,
    const std::string& run_dir);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_CONFIG_FROM_SETTINGS_H_
