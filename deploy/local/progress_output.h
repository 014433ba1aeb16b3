#ifndef PS_DEPLOY_LOCAL_PROGRESS_OUTPUT_H_
#define PS_DEPLOY_LOCAL_PROGRESS_OUTPUT_H_

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "deploy/local/cluster_output.h"
#include "deploy/local/training_progress.h"

namespace ps {

// The launcher's terminal when every line goes to the log files instead:
// one progress line for the whole job (a bar redrawn in place when `tty`,
// else a plain line every `interval`), a line per evaluated epoch, the
// children's warnings and errors, and the launcher's notices.
//
// Thread-safety: as ClusterOutput. `out` and `progress` are not owned and
// must outlive this.
class ProgressOutput : public ClusterOutput {
 public:
  ProgressOutput(std::FILE* out, bool tty, absl::Duration interval,
                 TrainingProgress* progress);

  void ProcessStarted(const ProcessId& who, int pid,
                      const std::vector<std::string>& argv) override {}
  void ProcessLine(const ProcessId& who, absl::string_view line) override;
  void LauncherLine(LaunchLevel level, absl::string_view text) override;

  // Leaves the bar's last state on its own line; later output starts on a
  // fresh one.
  void Close();

 private:
  // Writes a whole line, above the bar if one is shown.
  void PrintLocked(absl::string_view line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DrawBarLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ProgressText(const ProgressSnapshot& s) const;

  std::FILE* const out_;
  const bool tty_;
  const absl::Duration interval_;
  TrainingProgress* const progress_;

  absl::Mutex mu_;
  bool bar_shown_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_plain_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_draw_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int last_reported_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Warnings of one process come in bursts (a worker retrying a restarting
  // server logs each retry): after one is shown, the next ones within
  // kWarningQuiet are only counted, and said with the next one shown.
  struct WarningState {
    absl::Time shown = absl::InfinitePast();
    int held_back = 0;
  };
  std::map<std::string, WarningState> warnings_ ABSL_GUARDED_BY(mu_);
};

// Feeds the workers' lines to `progress` (for the curves) and passes
// everything on to `next`: what --output=stream uses. Thread-safety: as
// ClusterOutput; neither pointer is owned, both must outlive this.
class ProgressTap : public ClusterOutput {
 public:
  ProgressTap(TrainingProgress* progress, ClusterOutput* next)
      : progress_(progress), next_(next) {}
  void ProcessStarted(const ProcessId& who, int pid,
                      const std::vector<std::string>& argv) override {
    next_->ProcessStarted(who, pid, argv);
  }
  void ProcessLine(const ProcessId& who, absl::string_view line) override {
    if (!who.is_server) progress_->Feed(who.index, line);
    next_->ProcessLine(who, line);
  }
  void LauncherLine(LaunchLevel level, absl::string_view text) override {
    next_->LauncherLine(level, text);
  }

 private:
  TrainingProgress* const progress_;
  ClusterOutput* const next_;
};

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_PROGRESS_OUTPUT_H_
