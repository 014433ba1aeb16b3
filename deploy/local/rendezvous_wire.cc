#include "deploy/local/rendezvous_wire.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

absl::Status CheckHostIndex(int index, int num_hosts) {
  if (index < 0 || index >= num_hosts) {
    return absl::InvalidArgumentError(
        absl::StrCat("host_index ", index, " is not in [0, ", num_hosts, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

bool HostJoin::operator==(const HostJoin& other) const {
  return host_index == other.host_index && num_hosts == other.num_hosts &&
         address == other.address && settings == other.settings &&
         stage_link_port == other.stage_link_port;
}

bool JobPlan::operator==(const JobPlan& other) const {
  return job_id == other.job_id && hosts == other.hosts &&
         stage_link_secret == other.stage_link_secret;
}

bool HostReport::operator==(const HostReport& other) const {
  return host_index == other.host_index && exit_code == other.exit_code &&
         failure == other.failure &&
         bad_configuration == other.bad_configuration &&
         final_test_accuracy == other.final_test_accuracy &&
         processes == other.processes;
}

bool HostStatus::operator==(const HostStatus& other) const {
  return host_index == other.host_index && settled == other.settled &&
         report == other.report && lost == other.lost;
}

rendezvous::JoinRequest WriteJoin(const HostJoin& join) {
  rendezvous::JoinRequest request;
  request.set_host_index(join.host_index);
  request.set_num_hosts(join.num_hosts);
  request.set_address(join.address);
  for (const auto& [name, value] : join.settings) {
    (*request.mutable_settings())[name] = value;
  }
  request.set_stage_link_port(join.stage_link_port);
  return request;
}

absl::StatusOr<HostJoin> ReadJoin(const rendezvous::JoinRequest& request) {
  HostJoin join;
  join.num_hosts = request.num_hosts();
  if (join.num_hosts < 1 || join.num_hosts > kMaxHosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_hosts ", join.num_hosts, " is not in [1, ", kMaxHosts, "]"));
  }
  join.host_index = request.host_index();
  if (absl::Status s = CheckHostIndex(join.host_index, join.num_hosts);
      !s.ok()) {
    return s;
  }
  join.address = request.address();
  if (join.address.empty()) {
    return absl::InvalidArgumentError("a joining host must give its address");
  }
  join.settings.insert(request.settings().begin(), request.settings().end());
  join.stage_link_port = request.stage_link_port();
  if (join.stage_link_port < 0 || join.stage_link_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage_link_port ", join.stage_link_port, " is not a TCP port"));
  }
  return join;
}

bool JoinProgress::operator==(const JoinProgress& other) const {
  return plan == other.plan && waiting_for == other.waiting_for;
}

rendezvous::JoinResponse WritePlan(const JoinProgress& progress) {
  rendezvous::JoinResponse response;
  const std::optional<JobPlan>& plan = progress.plan;
  response.set_complete(plan.has_value());
  for (int host : progress.waiting_for) response.add_waiting_for(host);
  if (!plan.has_value()) return response;
  response.set_job_id(plan->job_id);
  response.set_stage_link_secret(plan->stage_link_secret);
  for (const HostShare& host : plan->hosts) {
    rendezvous::HostShare* share = response.add_hosts();
    share->set_address(host.address);
    share->set_first_rank(host.first_rank);
    share->set_num_workers(host.num_workers);
    share->set_first_server(host.first_server);
    share->set_num_servers(host.num_servers);
    share->set_stage_link_port(host.stage_link_port);
  }
  return response;
}

absl::StatusOr<JoinProgress> ReadPlan(
    const rendezvous::JoinResponse& response) {
  JoinProgress progress;
  progress.waiting_for.assign(response.waiting_for().begin(),
                              response.waiting_for().end());
  if (!response.complete()) return progress;
  JobPlan plan;
  plan.job_id = response.job_id();
  plan.stage_link_secret = response.stage_link_secret();
  if (response.hosts_size() < 1 || response.hosts_size() > kMaxHosts) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job plan of ", response.hosts_size(), " hosts"));
  }
  for (const rendezvous::HostShare& share : response.hosts()) {
    if (share.first_rank() < 0 || share.num_workers() < 0 ||
        share.first_server() < 0 || share.num_servers() < 0 ||
        share.stage_link_port() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("host ", plan.hosts.size(),
                       "'s share has a negative rank, shard, count or port"));
    }
    if (share.stage_link_port() > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("host ", plan.hosts.size(), "'s stage_link_port ",
                       share.stage_link_port(), " is not a TCP port"));
    }
    HostShare host;
    host.address = share.address();
    host.first_rank = share.first_rank();
    host.num_workers = share.num_workers();
    host.first_server = share.first_server();
    host.num_servers = share.num_servers();
    host.stage_link_port = share.stage_link_port();
    plan.hosts.push_back(std::move(host));
  }
  progress.plan = std::move(plan);
  return progress;
}

rendezvous::OutcomeRequest WriteReport(const HostReport& report) {
  rendezvous::OutcomeRequest request;
  request.set_host_index(report.host_index);
  request.set_exit_code(report.exit_code);
  request.set_failure(report.failure);
  request.set_bad_configuration(report.bad_configuration);
  if (report.final_test_accuracy.has_value()) {
    request.set_has_final_test_accuracy(true);
    request.set_final_test_accuracy(*report.final_test_accuracy);
  }
  for (const std::string& line : report.processes) {
    request.add_processes(line);
  }
  return request;
}

absl::StatusOr<HostReport> ReadReport(
    const rendezvous::OutcomeRequest& request) {
  HostReport report;
  report.host_index = request.host_index();
  if (report.host_index < 0 || report.host_index >= kMaxHosts) {
    return absl::InvalidArgumentError(
        absl::StrCat("host_index ", report.host_index, " out of range"));
  }
  report.exit_code = request.exit_code();
  if (report.exit_code < 0 || report.exit_code > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("exit_code ", report.exit_code, " is not in [0, 255]"));
  }
  report.failure = request.failure();
  if ((report.exit_code == 0) != report.failure.empty()) {
    return absl::InvalidArgumentError(
        "an outcome must name its failure exactly when its exit code is not 0");
  }
  report.bad_configuration = request.bad_configuration();
  if (request.has_final_test_accuracy()) {
    if (!std::isfinite(request.final_test_accuracy())) {
      return absl::InvalidArgumentError("final_test_accuracy is not finite");
    }
    report.final_test_accuracy = request.final_test_accuracy();
  }
  report.processes.assign(request.processes().begin(),
                          request.processes().end());
  return report;
}

rendezvous::StatusResponse WriteStatus(const std::vector<HostStatus>& hosts) {
  rendezvous::StatusResponse response;
  for (const HostStatus& host : hosts) {
    rendezvous::HostOutcome* outcome = response.add_hosts();
    outcome->set_host_index(host.host_index);
    outcome->set_settled(host.settled);
    if (host.report.has_value()) {
      *outcome->mutable_outcome() = WriteReport(*host.report);
    }
    outcome->set_lost(host.lost);
  }
  return response;
}

absl::StatusOr<std::vector<HostStatus>> ReadStatus(
    const rendezvous::StatusResponse& response) {
  std::vector<HostStatus> hosts;
  for (const rendezvous::HostOutcome& outcome : response.hosts()) {
    HostStatus host;
    host.host_index = outcome.host_index();
    host.settled = outcome.settled();
    if (outcome.has_outcome()) {
      absl::StatusOr<HostReport> report = ReadReport(outcome.outcome());
      if (!report.ok()) return report.status();
      host.report = *std::move(report);
    }
    host.lost = outcome.lost();
    if (host.settled && !host.report.has_value() && host.lost.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host ", host.host_index, " settled without outcome or loss"));
    }
    hosts.push_back(std::move(host));
  }
  return hosts;
}

}  // namespace ps
