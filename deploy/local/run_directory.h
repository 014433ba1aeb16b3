#ifndef PS_DEPLOY_LOCAL_RUN_DIRECTORY_H_
#define PS_DEPLOY_LOCAL_RUN_DIRECTORY_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ps {

// What a run is: the flags that define it, how far it got. Kept in the run
// directory's run.txt ("key value" lines).
struct RunRecord {
  std::string job_id;
  // running, finished, failed or stopped.
  std::string state = "running";
  // One line on how it ended, e.g. "final test accuracy 0.8971".
  std::string outcome;
  // The launcher flags that define the run, as NAME and VALUE.
  std::vector<std::pair<std::string, std::string>> flags;
  // argv of a program given after "--"; empty for our worker.
  std::vector<std::string> program;
};

// A run's directory: run.txt, logs/, checkpoints/, curves. Held with an
// exclusive lock (flock) for as long as this object lives, so that two
// launchers cannot run it at once.
//
// Thread-safety: not thread-safe; the launcher's main thread owns it.
class RunDirectory {
 public:
  // A new run in `path`, which must not exist or be empty.
  static absl::StatusOr<std::unique_ptr<RunDirectory>> Create(
      const std::string& path);
  // An existing run, to resume: `path` must hold run.txt.
  static absl::StatusOr<std::unique_ptr<RunDirectory>> Open(
      const std::string& path);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::string& path() const { return path_; }
  // PATH/name.
  std::string File(absl::string_view name) const;

  absl::StatusOr<RunRecord> Read() const;
  // Replaces run.txt atomically.
  absl::Status Write(const RunRecord& record) const;

 private:
  RunDirectory(std::string path, int lock_fd)
      : path_(std::move(path)), lock_fd_(lock_fd) {}

  const std::string path_;
  const int lock_fd_;
};

// A new run's name, e.g. "20260314-101500-3fa2": sorts by start time.
std::string NewRunName(absl::Time now);

// Parses run.txt's text.
absl::StatusOr<RunRecord> ParseRunRecord(absl::string_view text);
std::string FormatRunRecord(const RunRecord& record);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RUN_DIRECTORY_H_
