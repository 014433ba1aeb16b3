// A task of a scheduler's job, for the scheduler tests:
// `place_program OUT_DIR` writes where the client library says this worker
// stands (ps::WorkerPlace::FromEnvironment, which reads srun's or mpirun's
// variables) to OUT_DIR/place-RANK, "RANK NUM_WORKERS LOCAL_RANK
// LOCAL_NUM_WORKERS", and exits 0; or the library's error message to
// OUT_DIR/error-PID, and exits 2 (kExitBadConfig), as a worker does.

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/parameter_client.h"
#include "common/exit_codes.h"

namespace {

// Writes `text` to `path` whole or not at all (a reader never sees half).
bool WriteAtomically(const std::string& path, const std::string& text) {
  const std::string temporary = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(temporary);
    out << text;
    if (!out.good()) return false;
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  return !error;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return ps::kExitBadConfig;
  }
  const std::string out_dir = argv[1];
  const absl::StatusOr<ps::WorkerPlace> place =
      ps::WorkerPlace::FromEnvironment();
  if (!place.ok()) {
    WriteAtomically(absl::StrCat(out_dir, "/error-", getpid()),
                    std::string(place.status().message()));
    return ps::kExitBadConfig;
  }
  if (!WriteAtomically(
          absl::StrCat(out_dir, "/place-", place->rank),
          absl::StrCat(place->rank, " ", place->num_workers, " ",
                       place->local_rank, " ", place->local_num_workers))) {
    return ps::kExitFailed;
  }
  return ps::kExitOk;
}
