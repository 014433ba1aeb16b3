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
#include "deploy/local/summary.h"

namespace ps {
namespace {

// Port files only appear once written, so polling them is the one wait that
// no event announces.
constexpr absl::Duration kPortPollInterval = absl::Milliseconds(20);

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

std::string ChildName(bool is_server, int index) {
  return absl::StrCat(is_server ? "server " : "worker ", index);
}

}  // namespace

int ClusterResult::ExitCode() const {
  if (stop_signal != 0) return 128 + stop_signal;
  return status.ok() ? 0 : 1;
}

LocalCluster::LocalCluster(ClusterSpec spec, LineWriter* out)
    : spec_(std::move(spec)), out_(out) {}

void LocalCluster::Log(absl::string_view message) {
  out_->Write("[launch] ", message);
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

void LocalCluster::OnExit(int child, const std::string& name,
                          const ExitStatus& status) {
  Log(absl::StrCat(name, " ", status.ToString()));
  absl::MutexLock lock(&mu_);
  exit_order_.push_back(child);
  ++events_;
}

void LocalCluster::OnLine(const std::string& prefix, bool is_worker0,
                          absl::string_view line) {
  out_->Write(prefix, line);
  if (!is_worker0) return;
  if (std::optional<double> accuracy = ParseFinalTestAccuracy(line)) {
    absl::MutexLock lock(&mu_);
    final_test_accuracy_ = accuracy;
  }
}

absl::Status LocalCluster::StartChild(
    bool is_server, int index, std::vector<std::string> argv,
    std::vector<std::pair<std::string, std::string>> env) {
  const std::string name = ChildName(is_server, index);
  const int child = static_cast<int>(children_.size());
  SubprocessOptions options;
  options.argv = std::move(argv);
  options.env = std::move(env);
  options.name = name;
  options.kill_grace = spec_.kill_grace;
  options.line_callback = [this, prefix = absl::StrCat("[", name, "] "),
                           is_worker0 = !is_server &&
                                        index == 0](absl::string_view line) {
    OnLine(prefix, is_worker0, line);
  };
  options.exit_callback = [this, child, name](const ExitStatus& status) {
    OnExit(child, name, status);
  };
  const std::string program = options.argv.empty() ? "" : options.argv[0];
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      Subprocess::Start(std::move(options));
  if (!process.ok()) {
    return absl::Status(
        process.status().code(),
        absl::StrCat("cannot start ", name, ": ", process.status().message()));
  }
  Log(absl::StrCat("started ", name, " (pid ", (*process)->pid(),
                   "): ", program));
  children_.push_back(Child{name, is_server, index, *std::move(process)});
  return absl::OkStatus();
}

absl::Status LocalCluster::CheckForFailure(Phase phase) {
  std::vector<int> exited;
  {
    absl::MutexLock lock(&mu_);
    if (stop_signal_ != 0) {
      const char* abbrev = sigabbrev_np(stop_signal_);
      return absl::CancelledError(absl::StrCat(
          "interrupted by signal ", stop_signal_,
          abbrev != nullptr ? absl::StrCat(" (SIG", abbrev, ")") : ""));
    }
    exited = exit_order_;
  }
  // The first to fail is reported: later failures are usually its echo.
  for (int i : exited) {
    Child& child = children_[i];
    const ExitStatus status = child.process->Wait();  // Already exited.
    // Once workers run, a server may exit 0 as soon as all of them said
    // Done, while the last one is still exiting: only startup forbids it.
    const bool failed =
        !status.success() || (child.is_server && phase == Phase::kStartup);
    if (!failed) continue;
    std::string context;
    if (phase == Phase::kStartup && child.is_server) {
      context = " before the workers started";
    }
    const std::string last_line = child.process->LastLines(1);
    return absl::AbortedError(absl::StrCat(
        child.name, " ", status.ToString(), context,
        last_line.empty() ? " (no output)" : absl::StrCat(": ", last_line)));
  }
  return absl::OkStatus();
}

bool LocalCluster::AllExited(bool servers) {
  // Counts only exits already announced to CheckForFailure, so that a
  // failure cannot be missed by both.
  std::vector<bool> exited(children_.size(), false);
  {
    absl::MutexLock lock(&mu_);
    for (int i : exit_order_) exited[i] = true;
  }
  for (size_t i = 0; i < children_.size(); ++i) {
    if (children_[i].is_server == servers && !exited[i]) return false;
  }
  return true;
}

absl::Status LocalCluster::StartServers(const std::string& work_dir,
                                        std::vector<std::string>* addresses) {
  std::vector<std::string> port_files;
  for (int i = 0; i < spec_.num_servers; ++i) {
    if (absl::Status status = CheckForFailure(Phase::kStartup); !status.ok()) {
      return status;
    }
    port_files.push_back(absl::StrCat(work_dir, "/server_", i, ".port"));
    absl::Status status =
        StartChild(true, i, spec_.server_command(i, port_files.back()));
    if (!status.ok()) return status;
  }
  std::vector<int> ports(spec_.num_servers, 0);
  const absl::Time deadline = absl::Now() + spec_.startup_timeout;
  while (true) {
    const int64_t seen = Events();
    std::vector<int> waiting;
    for (int i = 0; i < spec_.num_servers; ++i) {
      if (ports[i] != 0) continue;
      absl::StatusOr<int> port = ReadPortFile(port_files[i]);
      if (port.ok()) {
        ports[i] = *port;
        Log(absl::StrCat("server ", i, " listening on ", spec_.host, ":",
                         *port));
      } else if (absl::IsNotFound(port.status())) {
        waiting.push_back(i);
      } else {
        return absl::Status(
            port.status().code(),
            absl::StrCat("server ", i, ": ", port.status().message()));
      }
    }
    if (absl::Status status = CheckForFailure(Phase::kStartup); !status.ok()) {
      return status;
    }
    if (waiting.empty()) break;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("server ", absl::StrJoin(waiting, ", "),
                       " did not write a port file within ",
                       absl::FormatDuration(spec_.startup_timeout)));
    }
    AwaitEvent(seen, std::min(deadline, now + kPortPollInterval));
  }
  for (int port : ports) {
    addresses->push_back(absl::StrCat(spec_.host, ":", port));
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::StartWorkers(
    const std::vector<std::string>& addresses) {
  for (int rank = 0; rank < spec_.num_workers; ++rank) {
    if (absl::Status status = CheckForFailure(Phase::kTraining); !status.ok()) {
      return status;
    }
    std::vector<std::pair<std::string, std::string>> env;
    if (spec_.worker_environment) {
      env = spec_.worker_environment(rank, addresses);
    }
    absl::Status status = StartChild(
        false, rank, spec_.worker_command(rank, addresses), std::move(env));
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::AwaitWorkers() {
  while (true) {
    const int64_t seen = Events();
    if (absl::Status status = CheckForFailure(Phase::kTraining); !status.ok()) {
      return status;
    }
    if (AllExited(/*servers=*/false)) return absl::OkStatus();
    AwaitEvent(seen, absl::InfiniteFuture());
  }
}

absl::Status LocalCluster::AwaitServerExit(std::vector<std::string>* notes) {
  Log("all workers finished; waiting for the servers to exit");
  const absl::Time deadline = absl::Now() + spec_.shutdown_timeout;
  while (true) {
    const int64_t seen = Events();
    if (absl::Status status = CheckForFailure(Phase::kShutdown); !status.ok()) {
      return status;
    }
    if (AllExited(/*servers=*/true)) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      std::vector<std::string> running;
      for (const Child& child : children_) {
        if (child.is_server && !child.process->TryWait().has_value()) {
          running.push_back(child.name);
        }
      }
      notes->push_back(
          absl::StrCat(absl::StrJoin(running, ", "), " still running ",
                       absl::FormatDuration(spec_.shutdown_timeout),
                       " after the workers finished; stopped by the launcher"));
      return absl::OkStatus();
    }
    AwaitEvent(seen, deadline);
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
    if (child.process->TryWait().has_value()) continue;
    child.stopped_by_launcher = true;
    any_running = true;
    child.process->Kill(signal).IgnoreError();  // Killed below if need be.
  }
  if (!any_running) return;
  Log(absl::StrCat("stopping the remaining processes (signal ", signal,
                   ", SIGKILL after ", absl::FormatDuration(spec_.kill_grace),
                   ")"));
  const absl::Time deadline = absl::Now() + spec_.kill_grace;
  while (absl::Now() < deadline) {
    const int64_t seen = Events();
    if (AllExited(true) && AllExited(false)) break;
    {
      absl::MutexLock lock(&mu_);
      if (kill_now_) break;
    }
    AwaitEvent(seen, deadline);
  }
  for (Child& child : children_) {
    if (!child.process->TryWait().has_value()) {
      child.process->Kill(SIGKILL).IgnoreError();
    }
  }
  for (Child& child : children_) child.process->Wait();
}

ClusterResult LocalCluster::Run() {
  const absl::Time start = absl::Now();
  ClusterResult result;
  children_.reserve(spec_.num_servers + spec_.num_workers);
  absl::StatusOr<std::unique_ptr<TempDir>> work_dir =
      TempDir::Create(spec_.temp_root);
  absl::Status status = work_dir.status();
  std::vector<std::string> addresses;
  if (status.ok()) status = StartServers((*work_dir)->path(), &addresses);
  if (status.ok()) status = StartWorkers(addresses);
  if (status.ok()) status = AwaitWorkers();
  if (status.ok()) {
    if (spec_.stop_servers_after_workers) {
      Log("all workers finished; stopping the servers");
    } else {
      status = AwaitServerExit(&result.notes);
    }
  }
  if (!status.ok()) Log(absl::StrCat("stopping: ", status.message()));
  StopAll();

  result.status = status;
  for (bool servers : {true, false}) {
    const int count = servers ? spec_.num_servers : spec_.num_workers;
    for (int i = 0; i < count; ++i) {
      ProcessOutcome outcome{ChildName(servers, i), std::nullopt, false};
      for (const Child& child : children_) {
        if (child.is_server == servers && child.index == i) {
          outcome.exit = child.process->Wait();
          outcome.stopped_by_launcher = child.stopped_by_launcher;
        }
      }
      result.processes.push_back(std::move(outcome));
    }
  }
  // Destroying the children joins their threads: no callback runs after.
  children_.clear();
  absl::MutexLock lock(&mu_);
  result.stop_signal = stop_signal_;
  result.final_test_accuracy = final_test_accuracy_;
  result.elapsed = absl::Now() - start;
  return result;
}

}  // namespace ps
