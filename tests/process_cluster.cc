#include "tests/process_cluster.h"

#include <signal.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "deploy/local/run_directory.h"
#include "tests/cluster_runner.h"

namespace ps::testing {

namespace {

// `config`, its servers writing their reports into a directory of the test
// unless it names one.
LaunchConfig WithRunDir(LaunchConfig config) {
  if (config.run_dir.empty()) config.run_dir = TempPath("process_cluster");
  return config;
}

}  // namespace

ProcessCluster::ProcessCluster(LaunchConfig config)
    : config_(WithRunDir(std::move(config))),
      work_dir_(TempPath("")),
      ports_(config_.num_servers, 0),
      servers_(config_.num_servers),
      workers_(config_.num_workers) {
  const std::string report = ServerReportFile(config_.run_dir, 0);
  std::filesystem::create_directories(
      std::filesystem::path(report).parent_path());
  // An earlier cluster's reports would be taken for this one's.
  for (int i = 0; i < config_.num_servers; ++i) {
    std::filesystem::remove(ServerReportFile(config_.run_dir, i));
  }
}

absl::StatusOr<server::ShardReport> ProcessCluster::ServerReport(
    int index) const {
  return server::ReadShardReport(ServerReportFile(config_.run_dir, index));
}

ProcessCluster::~ProcessCluster() {
  // Workers first, so that no worker sees its servers vanish and logs
  // retries while the test is over.
  workers_.clear();
  servers_.clear();
}

absl::StatusOr<std::unique_ptr<Subprocess>> ProcessCluster::Spawn(
    const std::string& name, std::vector<std::string> argv) {
  return Subprocess::Start(TestProcessOptions(name, std::move(argv)));
}

absl::Status ProcessCluster::StartServer(
    int index, const std::vector<std::string>& extra_flags) {
  const std::string port_file =
      absl::StrCat(work_dir_, "server-", index, "-", restarts_++, ".port");
  // A file left by an earlier cluster of the same test would name its port.
  std::filesystem::remove(port_file);
  std::vector<std::string> argv = ServerArgv(config_, index, port_file);
  if (ports_[index] != 0) {
    argv.push_back(absl::StrCat("--port=", ports_[index]));  // Last wins.
  }
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  servers_[index].reset();
  absl::StatusOr<std::unique_ptr<Subprocess>> server =
      Spawn(absl::StrCat("server ", index), std::move(argv));
  if (!server.ok()) return server.status();
  servers_[index] = *std::move(server);
  absl::StatusOr<int> port =
      WaitForPortFile(port_file, absl::Seconds(30), servers_[index].get());
  if (!port.ok()) return port.status();
  ports_[index] = *port;
  return absl::OkStatus();
}

absl::Status ProcessCluster::StartAllServers() {
  for (int i = 0; i < config_.num_servers; ++i) {
    absl::Status status = StartServer(i);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

std::vector<std::string> ProcessCluster::Addresses() const {
  std::vector<std::string> addresses;
  for (int port : ports_) {
    addresses.push_back(absl::StrCat("127.0.0.1:", port));
  }
  return addresses;
}

absl::Status ProcessCluster::StartWorker(
    int rank, const std::vector<std::string>& extra_flags) {
  std::vector<std::string> argv = WorkerArgv(config_, rank, Addresses());
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  workers_[rank].reset();
  absl::StatusOr<std::unique_ptr<Subprocess>> worker =
      Spawn(absl::StrCat("worker ", rank), std::move(argv));
  if (!worker.ok()) return worker.status();
  workers_[rank] = *std::move(worker);
  return absl::OkStatus();
}

absl::Status ProcessCluster::StartAllWorkers() {
  for (int r = 0; r < config_.num_workers; ++r) {
    absl::Status status = StartWorker(r);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

void ProcessCluster::KillServer(int index) {
  if (servers_[index] == nullptr) return;
  servers_[index]->Kill(SIGKILL).IgnoreError();
  servers_[index]->Wait();
}

void ProcessCluster::KillWorker(int rank) {
  if (workers_[rank] == nullptr) return;
  workers_[rank]->Kill(SIGKILL).IgnoreError();
  workers_[rank]->Wait();
}

std::optional<ExitStatus> ProcessCluster::WaitWorker(int rank,
                                                     absl::Duration timeout) {
  return workers_[rank]->WaitFor(timeout);
}

std::optional<ExitStatus> ProcessCluster::WaitServer(int index,
                                                     absl::Duration timeout) {
  return servers_[index]->WaitFor(timeout);
}

absl::StatusOr<std::string> ProcessCluster::AwaitWorkerLine(
    int rank, absl::string_view text, absl::Duration timeout) {
  return workers_[rank]->WaitForOutputLine(text, timeout);
}

absl::StatusOr<std::string> ProcessCluster::AwaitServerLine(
    int index, absl::string_view text, absl::Duration timeout) {
  return servers_[index]->WaitForOutputLine(text, timeout);
}

std::vector<std::string> ProcessCluster::ServerLines(int index) const {
  return servers_[index]->OutputLines();
}

std::vector<std::string> ProcessCluster::WorkerLines(int rank) const {
  return workers_[rank]->OutputLines();
}

}  // namespace ps::testing
