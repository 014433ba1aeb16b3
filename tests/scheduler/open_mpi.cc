#include "tests/scheduler/open_mpi.h"

#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/cluster_runner.h"

namespace ps::testing {
namespace {

constexpr char kMpirun[] = "/usr/bin/mpirun";

}  // namespace

std::string WhyMpirunUnavailable() {
  if (access(kMpirun, X_OK) != 0) {
    return absl::StrCat(kMpirun,
                        " not found (Debian's openmpi-bin, which "
                        "scripts/install_deps.sh installs)");
  }
  return "";
}

SubprocessOptions MpirunOptions(const std::string& name, int num_processes,
                                std::vector<std::string> argv) {
  std::vector<std::string> mpirun = {kMpirun,     "--oversubscribe",
                                     "--bind-to", "none",
                                     "-np",       absl::StrCat(num_processes)};
  if (geteuid() == 0) mpirun.insert(mpirun.begin() + 1, "--allow-run-as-root");
  mpirun.insert(mpirun.end(), argv.begin(), argv.end());
  SubprocessOptions options = TestProcessOptions(name, std::move(mpirun));
  options.env = {{"TMPDIR", "/tmp"}};
  return options;
}

}  // namespace ps::testing
