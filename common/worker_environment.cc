#include "common/worker_environment.h"

#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/cluster_address.h"

namespace ps {
namespace {

// More than any host or job of ours runs; a bound that catches garbage.
constexpr int kMaxWorkers = 1 << 16;

// Where a worker is among the others; a scheduler may give these instead.
constexpr const char* kRankVariables[] = {
    "PS_NUM_WORKERS", "PS_RANK", "PS_LOCAL_NUM_WORKERS", "PS_LOCAL_RANK"};
constexpr const char* kServerVariables[] = {"PS_NUM_SERVERS", "PS_SERVERS"};
// Stands in for PS_SERVERS where the list is a pattern of names, as a
// Kubernetes StatefulSet's pods have (deploy/k8s): "{index}" becomes 0 ..
// PS_NUM_SERVERS-1, as in the worker's --server_pattern.
constexpr const char* kServerPatternVariable = "PS_SERVER_PATTERN";

// Every unset variable at once, and the ways to set them.
absl::Status NotSet(const std::vector<std::string>& names) {
  return absl::InvalidArgumentError(absl::StrCat(
      absl::StrJoin(names, ", ",
                    [](std::string* out, const std::string& name) {
                      absl::StrAppend(out, "$", name);
                    }),
      names.size() == 1 ? " is" : " are",
      " not set: start worker programs with `launch -- PROGRAM`, or under "
      "`srun` or `mpirun` (which give the ranks; $PS_NUM_SERVERS and "
      "$PS_SERVERS still name the servers), or set them yourself (README, "
      "\"Running the binaries yourself\")"));
}

// A set variable: a number in [low, high].
absl::StatusOr<int> ReadCount(
    absl::FunctionRef<const char*(const char*)> lookup, const char* name,
    int low, int high) {
  const char* value = lookup(name);
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < low || n > high) {
    return absl::InvalidArgumentError(
        absl::StrCat("$", name, " must be a number in [", low, ", ", high,
                     "], got '", value, "'"));
  }
  return n;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> WorkerEnvironmentVariables(
    const WorkerEnvironment& environment) {
  const std::string rank = absl::StrCat(environment.rank);
  const std::string num_workers = absl::StrCat(environment.num_workers);
  const std::string local_rank = absl::StrCat(environment.local_rank);
  const std::string local_num_workers =
      absl::StrCat(environment.local_num_workers);
  return {
      {"PS_RANK", rank},
      {"PS_NUM_WORKERS", num_workers},
      {"PS_LOCAL_RANK", local_rank},
      {"PS_LOCAL_NUM_WORKERS", local_num_workers},
      {"PS_NUM_SERVERS", absl::StrCat(environment.servers.size())},
      {"PS_SERVERS", absl::StrJoin(environment.servers, ",")},
      {"PS_JOB_ID", environment.job_id},
      {"PS_TLS_CA", environment.tls_ca_file},
      {"PS_TLS_CERT", environment.tls_cert_file},
      {"PS_TLS_KEY", environment.tls_key_file},
      {"PS_TLS_SERVER_NAME", environment.tls_server_name},
      {"PS_TOKEN_FILE", environment.token_file},
      {"RANK", rank},
      {"WORLD_SIZE", num_workers},
      {"LOCAL_RANK", local_rank},
      {"LOCAL_WORLD_SIZE", local_num_workers},
  };
}

void ReadAuthEnvironment(absl::FunctionRef<const char*(const char*)> lookup,
                         WorkerEnvironment* environment) {
  for (auto [name, field] : {
           std::pair{"PS_TLS_CA", &environment->tls_ca_file},
           std::pair{"PS_TLS_CERT", &environment->tls_cert_file},
           std::pair{"PS_TLS_KEY", &environment->tls_key_file},
           std::pair{"PS_TLS_SERVER_NAME", &environment->tls_server_name},
           std::pair{"PS_TOKEN_FILE", &environment->token_file},
       }) {
    if (const char* value = lookup(name); value != nullptr) *field = value;
  }
}

absl::StatusOr<WorkerEnvironment> ReadWorkerEnvironment(
    absl::FunctionRef<const char*(const char*)> lookup) {
  WorkerEnvironment environment;
  std::vector<std::string> unset;
  for (const char* name : kRankVariables) {
    if (lookup(name) == nullptr) unset.push_back(name);
  }
  std::optional<LaunchEnvironment> launch;
  if (unset.size() == std::size(kRankVariables)) {
    absl::StatusOr<std::optional<LaunchEnvironment>> scheduler =
        ReadLaunchEnvironment(lookup);
    if (!scheduler.ok()) return scheduler.status();
    launch = *std::move(scheduler);
    if (launch.has_value()) unset.clear();
  }
  const char* pattern = lookup(kServerPatternVariable);
  for (const char* name : kServerVariables) {
    if (lookup(name) == nullptr &&
        !(pattern != nullptr && absl::string_view(name) == "PS_SERVERS")) {
      unset.push_back(name);
    }
  }
  if (!unset.empty()) return NotSet(unset);
  const char* list = lookup("PS_SERVERS");
  if (list != nullptr && pattern != nullptr) {
    return absl::InvalidArgumentError(
        "both $PS_SERVERS and $PS_SERVER_PATTERN are set; set one");
  }

  if (launch.has_value()) {
    ApplyLaunchEnvironment(*launch, &environment);
  } else {
    absl::StatusOr<int> num_workers =
        ReadCount(lookup, "PS_NUM_WORKERS", 1, kMaxWorkers);
    if (!num_workers.ok()) return num_workers.status();
    absl::StatusOr<int> rank =
        ReadCount(lookup, "PS_RANK", 0, *num_workers - 1);
    if (!rank.ok()) return rank.status();
    absl::StatusOr<int> local_num_workers =
        ReadCount(lookup, "PS_LOCAL_NUM_WORKERS", 1, *num_workers);
    if (!local_num_workers.ok()) return local_num_workers.status();
    absl::StatusOr<int> local_rank =
        ReadCount(lookup, "PS_LOCAL_RANK", 0, *local_num_workers - 1);
    if (!local_rank.ok()) return local_rank.status();
    environment.rank = *rank;
    environment.num_workers = *num_workers;
    environment.local_rank = *local_rank;
    environment.local_num_workers = *local_num_workers;
  }
  absl::StatusOr<int> num_servers =
      ReadCount(lookup, "PS_NUM_SERVERS", 1, kMaxWorkers);
  if (!num_servers.ok()) return num_servers.status();
  absl::StatusOr<std::vector<std::string>> servers =
      list != nullptr ? ParseServerList(list)
                      : ExpandServerPattern(pattern, *num_servers);
  if (!servers.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(list != nullptr ? "$PS_SERVERS: " : "$PS_SERVER_PATTERN: ",
                     servers.status().message()));
  }
  if (servers->size() != static_cast<size_t>(*num_servers)) {
    return absl::InvalidArgumentError(
        absl::StrCat("$PS_SERVERS lists ", servers->size(),
                     " servers but $PS_NUM_SERVERS is ", *num_servers));
  }
  if (const char* job_id = lookup("PS_JOB_ID"); job_id != nullptr) {
    if (absl::Status s = ValidateJobId(job_id); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("$PS_JOB_ID: ", s.message()));
    }
    environment.job_id = job_id;
  }
  ReadAuthEnvironment(lookup, &environment);
  environment.servers = *std::move(servers);
  return environment;
}

void ApplyLaunchEnvironment(const LaunchEnvironment& launch,
                            WorkerEnvironment* worker) {
  worker->rank = launch.rank;
  worker->num_workers = launch.num_tasks;
  worker->local_rank = launch.local_rank;
  worker->local_num_workers = launch.local_num_tasks;
}

}  // namespace ps
