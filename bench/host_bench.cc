#include "bench/host_bench.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace ps::testing {

int HostsFor(ServiceLayout layout, int num_workers) {
  return layout == ServiceLayout::kServersApart ? num_workers + 2 : num_workers;
}

std::unique_ptr<TestHosts> CreateHosts(int num_hosts, int64_t bits_per_second) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made =
      TestHosts::Create(num_hosts, bits_per_second);
  if (!made.ok()) {
    std::fprintf(stderr, "hosts: %s\n", made.status().ToString().c_str());
    return nullptr;
  }
  return *std::move(made);
}

std::string RunfilePath(const std::string& workspace_relative) {
  if (const char* runfiles = std::getenv("RUNFILES_DIR"); runfiles != nullptr) {
    return absl::StrCat(runfiles, "/paramserver/", workspace_relative);
  }
  return (std::filesystem::current_path() / workspace_relative).string();
}

std::unique_ptr<Subprocess> StartOn(
    const TestHosts& hosts, int host, const std::string& name,
    std::vector<std::string> argv,
    std::vector<std::pair<std::string, std::string>> env) {
  SubprocessOptions options;
  options.argv = std::move(argv);
  options.env = std::move(env);
  options.name = name;
  options.kill_grace = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      hosts.Start(host, std::move(options));
  if (!child.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(),
                 child.status().ToString().c_str());
    return nullptr;
  }
  return *std::move(child);
}

std::optional<std::vector<std::string>> StartServices(
    const TestHosts& hosts, ServiceLayout layout, int num_workers,
    const std::vector<std::string>& server_flags, absl::Duration timeout,
    std::vector<std::unique_ptr<Subprocess>>& services) {
  std::vector<std::string> addresses;
  const int num_services = layout == ServiceLayout::kRing ? 1 : 2;
  for (int index = 0; index < num_services; ++index) {
    const int host =
        layout == ServiceLayout::kServersApart ? num_workers + index : index;
    const std::string port_file =
        absl::StrCat(std::filesystem::temp_directory_path().string(),
                     "/host-bench-", getpid(), "-", index, ".port");
    std::filesystem::remove(port_file);
    std::vector<std::string> argv;
    if (layout == ServiceLayout::kRing) {
      argv = {RunfilePath("allreduce/coordinator"),
              absl::StrCat("--num_workers=", num_workers)};
    } else {
      argv = {RunfilePath("server/server"),
              absl::StrCat("--server_index=", index), "--num_servers=2",
              absl::StrCat("--num_workers=", num_workers), "--mode=sync"};
      argv.insert(argv.end(), server_flags.begin(), server_flags.end());
    }
    argv.push_back(absl::StrCat("--host=", hosts.address(host)));
    argv.push_back("--port=0");
    argv.push_back(absl::StrCat("--port_file=", port_file));
    services.push_back(
        StartOn(hosts, host, absl::StrCat("service ", index), argv));
    if (services.back() == nullptr) return std::nullopt;
    absl::StatusOr<int> port =
        WaitForPortFile(port_file, timeout, services.back().get());
    std::filesystem::remove(port_file);
    if (!port.ok()) {
      std::fprintf(stderr, "port: %s\n", port.status().ToString().c_str());
      return std::nullopt;
    }
    addresses.push_back(absl::StrCat(hosts.address(host), ":", *port));
  }
  return addresses;
}

bool AwaitWorkers(const std::vector<std::unique_ptr<Subprocess>>& workers,
                  absl::Duration timeout) {
  for (size_t rank = 0; rank < workers.size(); ++rank) {
    const std::optional<ExitStatus> exit = workers[rank]->WaitFor(timeout);
    if (!exit.has_value() || !exit->success()) {
      std::fprintf(stderr, "worker %zu failed: %s\n", rank,
                   workers[rank]->LastLines(20).c_str());
      return false;
    }
  }
  return true;
}

}  // namespace ps::testing
