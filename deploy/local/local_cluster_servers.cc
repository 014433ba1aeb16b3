#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/subprocess.h"
#include "deploy/local/local_cluster.h"

// LocalCluster's servers: starting them (every one, of every stage's group
// when the job has several: the commands say which group a server is of),
// waiting for their port files, and waiting for them to exit at the end.

namespace ps {
namespace {

// Port files only appear once written, so polling them is the one wait that
// no event announces.
constexpr absl::Duration kPortPollInterval = absl::Milliseconds(20);

// A wait longer than this says what it waits for.
constexpr absl::Duration kQuietWait = absl::Seconds(5);

}  // namespace

absl::Status LocalCluster::StartServers(std::vector<std::string>* addresses) {
  for (int i = 0; i < spec_.num_servers; ++i) {
    if (absl::Status status = HandleExits(Phase::kStartup); !status.ok()) {
      return status;
    }
    children_.push_back(Child{ProcessId{true, spec_.first_server + i}});
    absl::Status status = StartChild(children_.size() - 1);
    if (!status.ok()) return status;
  }
  const absl::Time deadline = absl::Now() + spec_.startup_timeout;
  bool said_waiting = false;
  while (true) {
    const int64_t seen = Events();
    std::vector<int> waiting;
    for (int i = 0; i < spec_.num_servers; ++i) {
      Child& child = children_[i];
      if (child.port != 0) continue;
      const int index = child.id.index;
      const std::string port_file =
          absl::StrCat(work_dir_, "/server_", index, ".0.port");
      absl::StatusOr<int> port = ReadPortFile(port_file);
      if (port.ok()) {
        child.port = *port;
        Log(LaunchLevel::kDetail,
            absl::StrCat("server ", index, " listening on ", spec_.host, ":",
                         *port));
      } else if (absl::IsNotFound(port.status())) {
        waiting.push_back(index);
      } else {
        return absl::Status(
            port.status().code(),
            absl::StrCat("server ", index, ": ", port.status().message()));
      }
    }
    if (absl::Status status = HandleExits(Phase::kStartup); !status.ok()) {
      return status;
    }
    if (waiting.empty()) break;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "server ", absl::StrJoin(waiting, ", "),
          " did not write a port file within ",
          absl::FormatDuration(spec_.startup_timeout), " (--startup_timeout)"));
    }
    if (!said_waiting && now - start_ > kQuietWait) {
      said_waiting = true;
      Log(LaunchLevel::kNotice,
          absl::StrCat("waiting for server ", absl::StrJoin(waiting, ", "),
                       " to listen (at most --startup_timeout=",
                       absl::FormatDuration(spec_.startup_timeout), ")"));
    }
    AwaitEvent(seen, std::min(deadline, now + kPortPollInterval));
  }
  for (int i = 0; i < spec_.num_servers; ++i) {
    addresses->push_back(absl::StrCat(spec_.host, ":", children_[i].port));
  }
  if (!spec_.exchange_servers) return absl::OkStatus();
  // Exits during the exchange are the training phase's: once the others
  // have the list, a server may finish before this thread looks again.
  absl::StatusOr<std::vector<std::string>> all =
      spec_.exchange_servers(*addresses, [this] {
        absl::MutexLock lock(&mu_);
        return stop_signal_ != 0 || !abort_reason_.empty();
      });
  if (absl::Status status = HandleExits(Phase::kTraining); !status.ok()) {
    return status;  // A stop or an abort explains a failed exchange best.
  }
  if (!all.ok()) return all.status();
  *addresses = *std::move(all);
  return absl::OkStatus();
}

absl::Status LocalCluster::AwaitServerExit(std::vector<std::string>* notes) {
  for (Child& child : children_) {
    if (child.id.is_server && child.restart_at.has_value()) {
      child.restart_at.reset();
      notes->push_back(absl::StrCat(child.id.Name(),
                                    " was not restarted: every worker had "
                                    "finished"));
    }
  }
  Log(LaunchLevel::kDetail,
      absl::StrCat("all workers finished; waiting for the servers to exit "
                   "(at most --shutdown_timeout=",
                   absl::FormatDuration(spec_.shutdown_timeout), ")"));
  const absl::Time deadline = absl::Now() + spec_.shutdown_timeout;
  const absl::Time quiet_until = absl::Now() + kQuietWait;
  bool said_waiting = false;
  while (true) {
    const int64_t seen = Events();
    if (absl::Status status = HandleExits(Phase::kShutdown); !status.ok()) {
      return status;
    }
    if (AllExited(/*servers=*/true)) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      std::vector<std::string> running;
      for (const Child& child : children_) {
        if (child.id.is_server && !child.process->TryWait().has_value()) {
          running.push_back(child.id.Name());
        }
      }
      notes->push_back(absl::StrCat(
          absl::StrJoin(running, ", "), " still running ",
          absl::FormatDuration(spec_.shutdown_timeout),
          " after the workers finished (--shutdown_timeout); stopped by the "
          "launcher"));
      return absl::OkStatus();
    }
    if (!said_waiting && now >= quiet_until) {
      said_waiting = true;
      Log(LaunchLevel::kNotice,
          absl::StrCat("waiting for the servers to exit after the workers "
                       "finished (at most --shutdown_timeout=",
                       absl::FormatDuration(spec_.shutdown_timeout), ")"));
    }
    AwaitEvent(seen, std::min(deadline, said_waiting ? deadline : quiet_until));
  }
}

}  // namespace ps
