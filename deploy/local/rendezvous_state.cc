#include "deploy/local/rendezvous_state.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// "--epochs=2", or "no --epochs" when a host lacks the flag.
std::string FlagText(const std::map<std::string, std::string>& settings,
                     const std::string& name) {
  const auto it = settings.find(name);
  return it == settings.end() ? absl::StrCat("no --", name)
                              : absl::StrCat("--", name, "=", it->second);
}

// The first flag whose value differs between the two, "" if none.
std::string FirstDifference(const std::map<std::string, std::string>& a,
                            const std::map<std::string, std::string>& b) {
  for (const auto& [name, value] : a) {
    const auto it = b.find(name);
    if (it == b.end() || it->second != value) return name;
  }
  for (const auto& [name, value] : b) {
    if (a.find(name) == a.end()) return name;
  }
  return "";
}

}  // namespace

RendezvousState::RendezvousState(RendezvousOptions options, absl::Time now)
    : options_(std::move(options)), hosts_(options_.plan.size()) {
  for (Host& host : hosts_) host.last_seen = now;
}

absl::Status RendezvousState::CheckHost(int host) const {
  if (host < 0 || host >= static_cast<int>(hosts_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host index ", host, " is not in [0, ", hosts_.size(), ")"));
  }
  if (!hosts_[host].joined) {
    return absl::FailedPreconditionError(
        absl::StrCat("host ", host, " has not joined"));
  }
  return absl::OkStatus();
}

std::string RendezvousState::Name(int host) const {
  return HostName(host, hosts_[host].address);
}

void RendezvousState::Fail(std::string why, bool bad_configuration) {
  if (!failure_.empty()) return;
  failure_ = std::move(why);
  failure_is_bad_configuration_ = bad_configuration;
}

absl::Status RendezvousState::FailureStatus() const {
  return failure_is_bad_configuration_
             ? absl::InvalidArgumentError(failure_)
             : absl::FailedPreconditionError(failure_);
}

bool RendezvousState::AllJoined() const {
  for (const Host& host : hosts_) {
    if (!host.joined) return false;
  }
  return true;
}

void RendezvousState::Sweep(absl::Time now) {
  for (size_t i = 0; i < hosts_.size(); ++i) {
    Host& host = hosts_[i];
    if (!host.joined || host.report.has_value() || !host.lost.empty()) {
      continue;
    }
    if (now - host.last_seen > options_.host_timeout) {
      host.lost = absl::StrCat(
          "its launcher stopped answering for ",
          absl::FormatDuration(options_.host_timeout),
          " (--host_timeout): it was killed, or its host is cut off");
      Fail(absl::StrCat(Name(static_cast<int>(i)), ": ", host.lost),
           /*bad_configuration=*/false);
    }
  }
}

absl::StatusOr<JoinProgress> RendezvousState::Join(const HostJoin& join,
                                                   absl::Time now) {
  absl::MutexLock lock(&mu_);
  Sweep(now);
  const int num_hosts = static_cast<int>(hosts_.size());
  if (join.num_hosts != num_hosts) {
    Fail(absl::StrCat(HostName(join.host_index, join.address),
                      " was given --num_hosts=", join.num_hosts,
                      ", but host 0 --num_hosts=", num_hosts,
                      ": every host must be given the same"),
         /*bad_configuration=*/true);
    return FailureStatus();
  }
  if (join.host_index < 0 || join.host_index >= num_hosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host index ", join.host_index, " is not in [0, ", num_hosts, ")"));
  }
  Host& host = hosts_[join.host_index];
  if (host.joined && host.address != join.address) {
    Fail(absl::StrCat("two hosts claim --host_index=", join.host_index, ": ",
                      host.address, " and ", join.address),
         /*bad_configuration=*/true);
  }
  if (const std::string flag =
          FirstDifference(options_.settings, join.settings);
      !flag.empty()) {
    Fail(absl::StrCat(HostName(join.host_index, join.address), " was given ",
                      FlagText(join.settings, flag), ", but host 0 ",
                      FlagText(options_.settings, flag),
                      ": every host must be given the same job flags"),
         /*bad_configuration=*/true);
  }
  if (!failure_.empty() &&
      !(host.joined && host.address == join.address && AllJoined())) {
    return FailureStatus();
  }
  host.joined = true;
  host.address = join.address;
  host.stage_link_port = join.stage_link_port;
  host.last_seen = now;
  JoinProgress progress;
  for (int i = 0; i < num_hosts; ++i) {
    if (!hosts_[i].joined) progress.waiting_for.push_back(i);
  }
  if (!progress.waiting_for.empty()) return progress;
  JobPlan plan;
  plan.job_id = options_.job_id;
  plan.hosts = options_.plan;
  plan.stage_link_secret = options_.stage_link_secret;
  for (int i = 0; i < num_hosts; ++i) {
    plan.hosts[i].address = hosts_[i].address;
    plan.hosts[i].stage_link_port = hosts_[i].stage_link_port;
  }
  progress.plan = std::move(plan);
  return progress;
}

absl::StatusOr<std::optional<std::vector<std::string>>>
RendezvousState::Servers(int host, const std::vector<std::string>& servers,
                         absl::Time now) {
  absl::MutexLock lock(&mu_);
  Sweep(now);
  if (absl::Status s = CheckHost(host); !s.ok()) return s;
  if (!failure_.empty()) return FailureStatus();
  const HostShare& share = options_.plan[host];
  if (static_cast<int>(servers.size()) != share.num_servers) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(host), " told ", servers.size(),
                     " servers; its share is ", share.num_servers));
  }
  hosts_[host].servers = servers;
  hosts_[host].last_seen = now;
  std::vector<std::string> all;
  for (const Host& each : hosts_) {
    if (!each.servers.has_value()) return std::nullopt;
    all.insert(all.end(), each.servers->begin(), each.servers->end());
  }
  return all;
}

absl::StatusOr<std::string> RendezvousState::Heartbeat(int host,
                                                       absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckHost(host); !s.ok()) return s;
  hosts_[host].last_seen = now;
  Sweep(now);
  return failure_;
}

absl::Status RendezvousState::Report(const HostReport& report, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckHost(report.host_index); !s.ok()) return s;
  Host& host = hosts_[report.host_index];
  host.last_seen = now;
  if (host.report.has_value() || !host.lost.empty()) return absl::OkStatus();
  host.report = report;
  if (!report.failure.empty()) {
    Fail(absl::StrCat(Name(report.host_index), ": ", report.failure),
         report.bad_configuration);
  }
  Sweep(now);
  return absl::OkStatus();
}

std::vector<HostStatus> RendezvousState::Status(absl::Time now) {
  absl::MutexLock lock(&mu_);
  Sweep(now);
  std::vector<HostStatus> hosts;
  for (size_t i = 0; i < hosts_.size(); ++i) {
    HostStatus status;
    status.host_index = static_cast<int>(i);
    status.report = hosts_[i].report;
    status.lost = hosts_[i].lost;
    status.settled = status.report.has_value() || !status.lost.empty();
    hosts.push_back(std::move(status));
  }
  return hosts;
}

}  // namespace ps
