#ifndef PS_DEPLOY_LOCAL_CLUSTER_OUTPUT_H_
#define PS_DEPLOY_LOCAL_CLUSTER_OUTPUT_H_

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "deploy/local/line_writer.h"

namespace ps {

// One process of a local cluster.
struct ProcessId {
  bool is_server = false;
  int index = 0;  // Server index or worker rank.
  // "server 0", "worker 1".
  std::string Name() const;
};

// How much a launcher message matters: kDetail only when every line is
// streamed (and in the launch log), kNotice always, kWarning and kError
// always and marked.
enum class LaunchLevel { kDetail, kNotice, kWarning, kError };

// A child's line looks like a warning or an error: spdlog's level
// ("] warning: ", "] error: ", "] critical: "), else common markers of other
// programs ("Traceback (most recent call last)", "Error:", "warning:").
enum class LineSeverity { kInfo, kWarning, kError };
LineSeverity SeverityOf(absl::string_view line);

// Where everything a cluster says goes: the children's lines and the
// launcher's own messages.
//
// Thread-safety: implementations must accept calls from any thread at once
// (each child's lines arrive on its own reader thread).
class ClusterOutput {
 public:
  virtual ~ClusterOutput() = default;
  // A process was (re)started with `argv`.
  virtual void ProcessStarted(const ProcessId& who, int pid,
                              const std::vector<std::string>& argv) = 0;
  // One line of a child's stdout or stderr, without '\n'.
  virtual void ProcessLine(const ProcessId& who, absl::string_view line) = 0;
  virtual void LauncherLine(LaunchLevel level, absl::string_view text) = 0;
};

// Everything on `writer` as it comes: "[launch] ..." for the launcher and
// "[worker 1] ..." for a child, unless its line names it already (our
// binaries' log pattern does).
class StreamedOutput : public ClusterOutput {
 public:
  // `writer` is not owned and must outlive this.
  explicit StreamedOutput(LineWriter* writer) : writer_(writer) {}

  void ProcessStarted(const ProcessId& who, int pid,
                      const std::vector<std::string>& argv) override;
  void ProcessLine(const ProcessId& who, absl::string_view line) override;
  void LauncherLine(LaunchLevel level, absl::string_view text) override;

 private:
  LineWriter* const writer_;
};

// What a terminal shows of a program path: the part after a Bazel runfiles
// tree or output base ("server/server"), else the path as given.
std::string ShortProgramName(absl::string_view path);

// Writes each process's lines to DIR/server-0.log, DIR/worker-1.log, ...
// (appending, with a header line at each start) and the launcher's messages
// to DIR/launch.log, then passes everything on to `next`.
//
// Thread-safety: as ClusterOutput. Owns its files; `next` is not owned and
// must outlive this.
class LogFiles : public ClusterOutput {
 public:
  // Creates DIR if need be.
  static absl::StatusOr<std::unique_ptr<LogFiles>> Create(
      const std::string& dir, ClusterOutput* next);
  ~LogFiles() override;

  void ProcessStarted(const ProcessId& who, int pid,
                      const std::vector<std::string>& argv) override;
  void ProcessLine(const ProcessId& who, absl::string_view line) override;
  void LauncherLine(LaunchLevel level, absl::string_view text) override;

  const std::string& dir() const { return dir_; }

 private:
  LogFiles(std::string dir, std::FILE* launch_log, ClusterOutput* next)
      : dir_(std::move(dir)), launch_log_(launch_log), next_(next) {}
  std::FILE* FileFor(const ProcessId& who) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  absl::Mutex mu_;
  std::FILE* const launch_log_ ABSL_PT_GUARDED_BY(mu_);
  // By ProcessId::Name(); opened on first use.
  std::map<std::string, std::FILE*> files_ ABSL_GUARDED_BY(mu_);
  ClusterOutput* const next_;
};

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_CLUSTER_OUTPUT_H_
