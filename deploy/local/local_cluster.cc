#include "deploy/local/local_cluster.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "common/progress_line.h"
#include "deploy/local/summary.h"

namespace ps {
namespace {

// A fresh directory for the run's port files, removed with its content.
class TempDir {
 public:
  static absl::StatusOr<std::unique_ptr<TempDir>> Create(std::string root) {
    if (root.empty()) {
      const char* tmp = getenv("TMPDIR");
      root = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
    }
    std::string pattern = absl::StrCat(root, "/ps-launch-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create a temporary directory in ", root, ": ",
                       strerror(errno)));
    }
    return std::unique_ptr<TempDir>(new TempDir(std::move(pattern)));
  }
  ~TempDir() {
    if (DIR* dir = opendir(path_.c_str())) {
      while (dirent* entry = readdir(dir)) {
        const std::string name = entry->d_name;
        if (name != "." && name != "..") {
          unlink(absl::StrCat(path_, "/", name).c_str());
        }
      }
      closedir(dir);
    }
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  const std::string path_;
};

// A restarted process's last line is quoted up to this long; its log has
// it whole.
constexpr size_t kMaxQuotedLine = 200;

// Whether a worker's output holds its done line (common/progress_line.h's
// TrainedSummary), which it prints once the servers acknowledged its Done.
bool PrintedDoneLine(const Subprocess& process) {
  return LastProgressOf<TrainedSummary>(process.OutputLines()).has_value();
}

std::string Seconds(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1)));
}

}  // namespace

int ClusterResult::ExitCode() const {
  if (stop_signal != 0) return ExitCodeForSignal(stop_signal);
  if (status.ok()) return kExitOk;
  return bad_configuration ? kExitBadConfig : kExitFailed;
}

LocalCluster::LocalCluster(ClusterSpec spec, ClusterOutput* out)
    : spec_(std::move(spec)), out_(out) {}

void LocalCluster::Log(LaunchLevel level, absl::string_view message) {
  out_->LauncherLine(level, message);
}

void LocalCluster::RequestStop(int signal) {
  absl::MutexLock lock(&mu_);
  if (stop_signal_ == 0) {
    stop_signal_ = signal;
  } else {
    kill_now_ = true;
  }
  ++events_;
}

void LocalCluster::Abort(std::string reason) {
  absl::MutexLock lock(&mu_);
  if (abort_reason_.empty()) abort_reason_ = std::move(reason);
  ++events_;
}

int64_t LocalCluster::Events() {
  absl::MutexLock lock(&mu_);
  return events_;
}

void LocalCluster::AwaitEvent(int64_t seen, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto moved = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return events_ != seen;
  };
  mu_.AwaitWithDeadline(absl::Condition(&moved), deadline);
}

void LocalCluster::OnExit(int child, int generation, const std::string& name,
                          const ExitStatus& status) {
  // A detail: HandleExits says what a failure means (a restart, or the end).
  Log(LaunchLevel::kDetail, absl::StrCat(name, " ", status.ToString()));
  absl::MutexLock lock(&mu_);
  exits_.emplace_back(child, generation);
  ++events_;
}

void LocalCluster::OnLine(const ProcessId& who, absl::string_view line) {
  out_->ProcessLine(who, line);
  if (who.is_server || who.index != 0) return;
  if (std::optional<double> accuracy = FindFinalTestAccuracy(line)) {
    absl::MutexLock lock(&mu_);
    final_test_accuracy_ = accuracy;
  }
}

absl::Status LocalCluster::StartChild(size_t slot) {
  Child& child = children_[slot];
  const ProcessId who = child.id;
  const std::string name = who.Name();
  SubprocessOptions options;
  if (who.is_server) {
    const std::string port_file = absl::StrCat(work_dir_, "/server_", who.index,
                                               ".", child.generation, ".port");
    options.argv = spec_.server_command(who.index, child.port, port_file);
  } else {
    options.argv = spec_.worker_command(who.index, addresses_);
    if (spec_.worker_environment) {
      options.env = spec_.worker_environment(who.index, addresses_);
    }
  }
  options.name = name;
  options.kill_grace = spec_.kill_grace;
  options.line_callback = [this, who](absl::string_view line) {
    OnLine(who, line);
  };
  options.exit_callback = [this, slot, generation = child.generation,
                           name](const ExitStatus& status) {
    OnExit(static_cast<int>(slot), generation, name, status);
  };
  const std::vector<std::string> argv = options.argv;
  // The old process (if any) has exited: this joins its threads.
  child.process.reset();
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      Subprocess::Start(std::move(options));
  if (!process.ok()) {
    return absl::Status(
        process.status().code(),
        absl::StrCat("cannot start ", name, ": ", process.status().message()));
  }
  out_->ProcessStarted(who, (*process)->pid(), argv);
  child.process = *std::move(process);
  child.exited = false;
  child.finished_before_exit = false;
  child.restart_at.reset();
  return absl::OkStatus();
}

absl::Status LocalCluster::HandleExits(Phase phase) {
  std::vector<std::pair<int, int>> exits;
  int stop_signal = 0;
  std::string abort_reason;
  {
    absl::MutexLock lock(&mu_);
    stop_signal = stop_signal_;
    abort_reason = abort_reason_;
    exits.assign(exits_.begin() + exits_handled_, exits_.end());
    exits_handled_ = exits_.size();
  }
  // The first to fail is reported: later failures are usually its echo.
  for (const auto& [slot, generation] : exits) {
    Child& child = children_[slot];
    if (generation != child.generation) continue;
    const ExitStatus status = child.process->Wait();  // Already exited.
    // Once workers run, a server may exit 0 as soon as all of them said
    // Done, while the last one is still exiting: only startup forbids it.
    const bool failed =
        !status.success() || (child.id.is_server && phase == Phase::kStartup);
    if (failed && failure_.ok() && !child.id.is_server &&
        phase == Phase::kTraining && PrintedDoneLine(*child.process)) {
      // Its servers acknowledged its Done before it printed the line: its
      // part of the job is complete, and a restart could only fail to find
      // servers that have since exited.
      child.exited = true;
      child.finished_before_exit = true;
      Log(LaunchLevel::kWarning,
          absl::StrCat(child.id.Name(), " ", status.ToString(),
                       " after its done line (\"trained N steps\"): "
                       "counted as finished, not restarted"));
      continue;
    }
    if (!failed || !failure_.ok()) {
      child.exited = true;
      continue;
    }
    const std::string last_line = child.process->LastLines(1);
    // A restart is reported with the line cut; a final failure whole.
    const std::string quoted =
        last_line.size() > kMaxQuotedLine
            ? absl::StrCat(last_line.substr(0, kMaxQuotedLine), "...")
            : last_line;
    const std::string how = absl::StrCat(
        status.ToString(),
        quoted.empty() ? " (no output)" : absl::StrCat(": ", quoted));
    const bool bad_config =
        status.exited() && status.exit_code() == kExitBadConfig;
    std::string context;  // Goes before the last line, as it always did.
    std::string why_not;  // Why it was not restarted; after the last line.
    if (phase != Phase::kTraining) {
      if (phase == Phase::kStartup && child.id.is_server) {
        context = " before the workers started";
      }
    } else if (stop_signal != 0 || spec_.max_restarts == 0) {
    } else if (bad_config) {
      why_not = " (exit code 2: bad configuration, not restarted)";
    } else if (!child.id.is_server && ServersGone()) {
      // A restarted worker would only find no server, and its failure to
      // reach one would hide this one.
      why_not = " (not restarted: every server had already exited)";
    } else if (child.id.is_server && !spec_.restart_servers) {
      why_not = " (not restarted: servers restart only from checkpoints)";
    } else if (static_cast<int>(restarts_.size()) >= spec_.max_restarts) {
      why_not = absl::StrCat(
          " (not restarted: --max_restarts=", spec_.max_restarts, " used up)");
    } else {
      const int nth = child.generation;  // Earlier restarts of this one.
      absl::Duration delay = spec_.restart_backoff;
      for (int i = 0; i < nth && delay < kMaxRestartBackoff; ++i) delay *= 2;
      delay = std::min(delay, kMaxRestartBackoff);
      const absl::Time now = absl::Now();
      child.exited = true;
      child.restart_at = now + delay;
      child.restart_reason = how;
      restarts_.push_back(
          RestartRecord{child.id.Name(), how, now - start_, delay});
      Log(LaunchLevel::kWarning,
          absl::StrCat(child.id.Name(), " ", how, "; restarting it in ",
                       Seconds(delay), " (restart ", restarts_.size(),
                       " of --max_restarts=", spec_.max_restarts, ")"));
      continue;
    }
    child.exited = true;
    failure_is_bad_configuration_ = bad_config;
    failure_ = absl::AbortedError(absl::StrCat(
        child.id.Name(), " ", status.ToString(), context,
        last_line.empty() ? " (no output)" : absl::StrCat(": ", last_line),
        why_not));
  }
  if (failure_.ok() && !abort_reason.empty()) {
    failure_ = absl::AbortedError(abort_reason);
  }
  if (stop_signal != 0) {
    const char* abbrev = sigabbrev_np(stop_signal);
    return absl::CancelledError(absl::StrCat(
        "interrupted by signal ", stop_signal,
        abbrev != nullptr ? absl::StrCat(" (SIG", abbrev, ")") : ""));
  }
  return failure_;
}

absl::Status LocalCluster::StartDueRestarts(absl::Time* next) {
  *next = absl::InfiniteFuture();
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& child = children_[i];
    if (!child.restart_at.has_value()) continue;
    if (!child.id.is_server && ServersGone()) {
      // The servers exited while the restart waited: the worker's own
      // failure ends the run, not the unreachable servers it would find.
      child.restart_at.reset();
      if (failure_.ok()) {
        failure_ = absl::AbortedError(
            absl::StrCat(child.id.Name(), " ", child.restart_reason,
                         " (not restarted: every server had exited in the "
                         "meantime)"));
      }
      return failure_;
    }
    if (*child.restart_at > now) {
      *next = std::min(*next, *child.restart_at);
      continue;
    }
    ++child.generation;
    if (absl::Status status = StartChild(i); !status.ok()) return status;
    Log(LaunchLevel::kNotice,
        absl::StrCat(
            "restarted ", child.id.Name(), " (pid ", child.process->pid(), ")",
            child.id.is_server ? absl::StrCat(" on port ", child.port,
                                              ", from its latest checkpoint")
                               : ", resuming where the servers recorded it"));
  }
  return absl::OkStatus();
}

bool LocalCluster::ServersGone() const {
  return spec_.num_servers > 0 && AllExited(/*servers=*/true);
}

bool LocalCluster::AllExited(bool servers) const {
  // Counts only exits HandleExits has seen, so that a failure cannot be
  // missed by both; a process waiting for its restart has not finished.
  for (const Child& child : children_) {
    if (child.id.is_server != servers) continue;
    if (!child.exited || child.restart_at.has_value()) return false;
  }
  return true;
}

absl::Status LocalCluster::StartWorkers() {
  for (int rank = 0; rank < spec_.num_workers; ++rank) {
    if (absl::Status status = HandleExits(Phase::kTraining); !status.ok()) {
      return status;
    }
    children_.push_back(Child{ProcessId{false, spec_.first_rank + rank}});
    absl::Status status = StartChild(children_.size() - 1);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::AwaitWorkers() {
  while (true) {
    const int64_t seen = Events();
    if (absl::Status status = HandleExits(Phase::kTraining); !status.ok()) {
      return status;
    }
    absl::Time next_restart;
    if (absl::Status status = StartDueRestarts(&next_restart); !status.ok()) {
      return status;
    }
    // A host without workers serves the job's until its servers exit.
    if (AllExited(/*servers=*/spec_.num_workers == 0)) {
      return absl::OkStatus();
    }
    AwaitEvent(seen, next_restart);
  }
}

void LocalCluster::StopAll() {
  int signal = SIGTERM;
  {
    absl::MutexLock lock(&mu_);
    if (stop_signal_ != 0) signal = stop_signal_;
  }
  bool any_running = false;
  for (Child& child : children_) {
    child.restart_at.reset();
    if (child.process == nullptr || child.process->TryWait().has_value()) {
      continue;
    }
    child.stopped_by_launcher = true;
    any_running = true;
    child.process->Kill(signal).IgnoreError();  // Killed below if need be.
  }
  if (!any_running) return;
  Log(LaunchLevel::kDetail,
      absl::StrCat("stopping the remaining processes (signal ", signal,
                   ", SIGKILL after --kill_grace=",
                   absl::FormatDuration(spec_.kill_grace), ")"));
  const absl::Time deadline = absl::Now() + spec_.kill_grace;
  while (absl::Now() < deadline) {
    const int64_t seen = Events();
    bool all_exited = true;
    for (Child& child : children_) {
      if (child.process != nullptr && !child.process->TryWait().has_value()) {
        all_exited = false;
      }
    }
    if (all_exited) break;
    {
      absl::MutexLock lock(&mu_);
      if (kill_now_) break;
    }
    AwaitEvent(seen, deadline);
  }
  for (Child& child : children_) {
    if (child.process != nullptr && !child.process->TryWait().has_value()) {
      child.process->Kill(SIGKILL).IgnoreError();
    }
  }
  for (Child& child : children_) {
    if (child.process != nullptr) child.process->Wait();
  }
}

ClusterResult LocalCluster::Run() {
  ClusterResult result;
  children_.reserve(spec_.num_servers + spec_.num_workers);
  absl::StatusOr<std::unique_ptr<TempDir>> work_dir =
      TempDir::Create(spec_.temp_root);
  absl::Status status = work_dir.status();
  if (status.ok()) {
    work_dir_ = (*work_dir)->path();
    status = StartServers(&addresses_);
  }
  if (status.ok()) {
    Log(LaunchLevel::kNotice,
        absl::StrCat(
            addresses_.size(), " server", addresses_.size() == 1 ? "" : "s",
            " listening on ", absl::StrJoin(addresses_, ", "), "; starting ",
            spec_.num_workers, " worker", spec_.num_workers == 1 ? "" : "s"));
    status = StartWorkers();
  }
  if (status.ok()) status = AwaitWorkers();
  if (status.ok()) {
    if (spec_.stop_servers_after_workers) {
      Log(LaunchLevel::kDetail, "all workers finished; stopping the servers");
    } else {
      status = AwaitServerExit(&result.notes);
    }
  }
  if (!status.ok()) {
    Log(absl::IsCancelled(status) ? LaunchLevel::kNotice : LaunchLevel::kError,
        absl::StrCat("stopping: ", status.message()));
  }
  StopAll();

  result.status = status;
  result.bad_configuration = !status.ok() && failure_is_bad_configuration_ &&
                             status.message() == failure_.message();
  for (bool servers : {true, false}) {
    const int count = servers ? spec_.num_servers : spec_.num_workers;
    const int first = servers ? spec_.first_server : spec_.first_rank;
    for (int i = first; i < first + count; ++i) {
      ProcessOutcome outcome{ProcessId{servers, i}.Name(), std::nullopt, false};
      for (const Child& child : children_) {
        if (child.id.is_server == servers && child.id.index == i &&
            child.process != nullptr) {
          outcome.exit = child.process->Wait();
          outcome.stopped_by_launcher = child.stopped_by_launcher;
          outcome.finished_before_exit = child.finished_before_exit;
        }
      }
      result.processes.push_back(std::move(outcome));
    }
  }
  // Destroying the children joins their threads: no callback runs after.
  children_.clear();
  result.restarts = restarts_;
  result.max_restarts = spec_.max_restarts;
  absl::MutexLock lock(&mu_);
  result.stop_signal = stop_signal_;
  result.final_test_accuracy = final_test_accuracy_;
  result.elapsed = absl::Now() - start_;
  return result;
}

}  // namespace ps
