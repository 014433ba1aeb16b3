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

// One launch of a run: the start, each --resume and each --extend.
struct RunSegment {
  // start, resume or extend.
  std::string kind;
  // Local time, e.g. "2026-03-14 10:15:00".
  std::string started;
  // The run-defining flags this segment changed (extend only), NAME and
  // the new VALUE.
  std::vector<std::pair<std::string, std::string>> flags;
  // How it ended, e.g. "finished: final test accuracy 0.8971"; empty while
  // it runs (or if its launcher was killed).
  std::string end;
};

// What a run is: the flags that define it, its segments, how far it got.
// Kept in the run directory's run.txt ("key value" lines).
struct RunRecord {
  std::string job_id;
  // running, finished, failed or stopped: the last segment's.
  std::string state = "running";
  // One line on how it ended, e.g. "final test accuracy 0.8971".
  std::string outcome;
  // The launcher flags the run was started with, as NAME and VALUE; each
  // extend segment's flags replace some (CurrentFlags).
  std::vector<std::pair<std::string, std::string>> flags;
  // argv of a program given after "--"; empty for our worker.
  std::vector<std::string> program;
  // In order; the first is the start (none in a run.txt of an older
  // launcher).
  std::vector<RunSegment> segments;
};

// The run's flags now: `record.flags` with every segment's changes applied
// in order.
std::vector<std::pair<std::string, std::string>> CurrentFlags(
    const RunRecord& record);
// Whether a segment extended the run (its servers then restore with
// --extend: their newest checkpoint may be of the run before it).
bool WasExtended(const RunRecord& record);

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

// The report (server/shard_report.h) server `server_index` writes at each
// exit, replacing the one before: `run_dir`/logs/server-<index>.report,
// beside its log.
std::string ServerReportFile(absl::string_view run_dir, int server_index);

// A new run's name, e.g. "20260314-101500-3fa2": sorts by start time.
std::string NewRunName(absl::Time now);
// A segment's start time, e.g. "2026-03-14 10:15:00" (local time).
std::string SegmentTime(absl::Time now);

// Keeps the files directly in `checkpoint_dir` (the servers' checkpoints)
// as they are now, in `checkpoint_dir`/`name`/: hard links (copies where
// the file system has none), so that they outlive what the servers write
// and delete next. The folder appears whole (through a rename) or not at
// all; one of that name is replaced. Returns how many files it holds;
// NotFound when there are none to keep.
absl::StatusOr<int> KeepCheckpoints(const std::string& checkpoint_dir,
                                    const std::string& name);

// Parses run.txt's text.
absl::StatusOr<RunRecord> ParseRunRecord(absl::string_view text);
std::string FormatRunRecord(const RunRecord& record);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RUN_DIRECTORY_H_
