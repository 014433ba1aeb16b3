#include "common/launch_environment.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "common/cluster_address.h"
#include "common/slurm_lists.h"

namespace ps {
namespace {

// More tasks than any job of ours runs; a bound that catches garbage.
constexpr int kMaxTasks = 1 << 16;

constexpr const char* kSlurmVariables[] = {
    "SLURM_PROCID",  "SLURM_NTASKS",
    "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NNODES",  "SLURM_STEP_NODELIST",
    "SLURM_JOB_ID",  "SLURM_STEP_TASKS_PER_NODE",
};
constexpr const char* kOpenMpiVariables[] = {
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
};

// Reads one scheduler's variables, gathering every problem instead of
// stopping at the first.
class VariableReader {
 public:
  explicit VariableReader(absl::FunctionRef<const char*(const char*)> lookup)
      : lookup_(lookup) {}

  // The value, or nullptr (noted as missing).
  const char* Text(const char* name) {
    const char* value = lookup_(name);
    if (value == nullptr) missing_.push_back(absl::StrCat("$", name));
    return value;
  }

  // A number in [low, kMaxTasks]; nullopt (noted) when unset or not one.
  std::optional<int> Number(const char* name, int low) {
    const char* value = Text(name);
    if (value == nullptr) return std::nullopt;
    int n = 0;
    const absl::string_view text(value);
    if (text.empty() || !absl::ascii_isdigit(text[0]) ||
        !absl::SimpleAtoi(text, &n) || n < low || n > kMaxTasks) {
      Problem(absl::StrCat("$", name, " must be a number in [", low, ", ",
                           kMaxTasks, "], got '", value, "'"));
      return std::nullopt;
    }
    return n;
  }

  void Problem(std::string text) { problems_.push_back(std::move(text)); }

  // OK, or every missing variable and every problem in one error.
  absl::Status Result(const char* scheduler, const char* hint) const {
    std::vector<std::string> parts;
    if (!missing_.empty()) {
      parts.push_back(absl::StrCat(absl::StrJoin(missing_, ", "),
                                   missing_.size() == 1 ? " is" : " are",
                                   " not set (", hint, ")"));
    }
    parts.insert(parts.end(), problems_.begin(), problems_.end());
    if (parts.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("the ", scheduler,
                     " environment is incomplete or "
                     "contradicts itself: ",
                     absl::StrJoin(parts, "; ")));
  }

 private:
  absl::FunctionRef<const char*(const char*)> lookup_;
  std::vector<std::string> missing_;
  std::vector<std::string> problems_;
};

bool AnySet(absl::FunctionRef<const char*(const char*)> lookup,
            absl::Span<const char* const> names) {
  for (const char* name : names) {
    if (lookup(name) != nullptr) return true;
  }
  return false;
}

// Checks `index` < `count` (both read), noting a contradiction otherwise.
void CheckBelow(VariableReader& reader, const std::optional<int>& index,
                const char* index_name, const std::optional<int>& count,
                const char* count_name) {
  if (index.has_value() && count.has_value() && *index >= *count) {
    reader.Problem(absl::StrCat("$", index_name, " (", *index,
                                ") must be below $", count_name, " (", *count,
                                ")"));
  }
}

// Checks `part` <= `whole` (both read), noting a contradiction otherwise.
void CheckAtMost(VariableReader& reader, const std::optional<int>& part,
                 const char* part_name, const std::optional<int>& whole,
                 const char* whole_name) {
  if (part.has_value() && whole.has_value() && *part > *whole) {
    reader.Problem(absl::StrCat("$", part_name, " (", *part,
                                ") must not exceed $", whole_name, " (", *whole,
                                ")"));
  }
}

absl::StatusOr<LaunchEnvironment> ReadSlurm(
    absl::FunctionRef<const char*(const char*)> lookup) {
  VariableReader reader(lookup);
  const std::optional<int> rank = reader.Number("SLURM_PROCID", 0);
  const std::optional<int> num_tasks = reader.Number("SLURM_NTASKS", 1);
  const std::optional<int> local_rank = reader.Number("SLURM_LOCALID", 0);
  const std::optional<int> node_rank = reader.Number("SLURM_NODEID", 0);
  const std::optional<int> num_nodes = reader.Number("SLURM_NNODES", 1);
  std::optional<std::vector<std::string>> nodes;
  if (const char* list = reader.Text("SLURM_STEP_NODELIST")) {
    absl::StatusOr<std::vector<std::string>> expanded =
        ExpandSlurmHostList(list);
    if (expanded.ok()) {
      nodes = *std::move(expanded);
    } else {
      reader.Problem(
          absl::StrCat("$SLURM_STEP_NODELIST: ", expanded.status().message()));
    }
  }
  std::optional<std::vector<int>> tasks_per_node;
  if (const char* list = reader.Text("SLURM_STEP_TASKS_PER_NODE")) {
    absl::StatusOr<std::vector<int>> expanded = ExpandSlurmTasksPerNode(list);
    if (expanded.ok()) {
      tasks_per_node = *std::move(expanded);
    } else {
      reader.Problem(absl::StrCat("$SLURM_STEP_TASKS_PER_NODE: ",
                                  expanded.status().message()));
    }
  }
  std::string job_id;
  if (const char* id = reader.Text("SLURM_JOB_ID")) {
    job_id = id;
    if (absl::Status s = ValidateJobId(job_id); !s.ok() || job_id.empty()) {
      reader.Problem(
          absl::StrCat("$SLURM_JOB_ID: '", job_id, "' is not a job id"));
    }
  }

  CheckBelow(reader, rank, "SLURM_PROCID", num_tasks, "SLURM_NTASKS");
  CheckBelow(reader, node_rank, "SLURM_NODEID", num_nodes, "SLURM_NNODES");
  CheckAtMost(reader, num_nodes, "SLURM_NNODES", num_tasks, "SLURM_NTASKS");
  if (nodes.has_value() && num_nodes.has_value() &&
      static_cast<int>(nodes->size()) != *num_nodes) {
    reader.Problem(absl::StrCat("$SLURM_STEP_NODELIST names ", nodes->size(),
                                " nodes but $SLURM_NNODES is ", *num_nodes));
  }
  std::optional<int> local_num_tasks;
  if (tasks_per_node.has_value()) {
    int sum = 0;
    for (int n : *tasks_per_node) sum += n;
    if (num_tasks.has_value() && sum != *num_tasks) {
      reader.Problem(absl::StrCat("$SLURM_STEP_TASKS_PER_NODE adds up to ", sum,
                                  " tasks but $SLURM_NTASKS is ", *num_tasks));
    }
    if (num_nodes.has_value() &&
        static_cast<int>(tasks_per_node->size()) != *num_nodes) {
      reader.Problem(absl::StrCat("$SLURM_STEP_TASKS_PER_NODE counts ",
                                  tasks_per_node->size(),
                                  " nodes but $SLURM_NNODES is ", *num_nodes));
    } else if (node_rank.has_value() &&
               *node_rank < static_cast<int>(tasks_per_node->size())) {
      local_num_tasks = (*tasks_per_node)[*node_rank];
      CheckBelow(reader, local_rank, "SLURM_LOCALID", local_num_tasks,
                 "SLURM_STEP_TASKS_PER_NODE of this node");
    }
  }
  if (absl::Status s =
          reader.Result("Slurm",
                        "start each task with srun, which sets them; a batch "
                        "script itself runs outside any step");
      !s.ok()) {
    return s;
  }
  LaunchEnvironment launch;
  launch.scheduler = Scheduler::kSlurm;
  launch.rank = *rank;
  launch.num_tasks = *num_tasks;
  launch.local_rank = *local_rank;
  launch.local_num_tasks = *local_num_tasks;
  launch.node_rank = *node_rank;
  launch.num_nodes = *num_nodes;
  launch.nodes = *std::move(nodes);
  launch.job_id = std::move(job_id);
  return launch;
}

absl::StatusOr<LaunchEnvironment> ReadOpenMpi(
    absl::FunctionRef<const char*(const char*)> lookup) {
  VariableReader reader(lookup);
  const std::optional<int> rank = reader.Number("OMPI_COMM_WORLD_RANK", 0);
  const std::optional<int> size = reader.Number("OMPI_COMM_WORLD_SIZE", 1);
  const std::optional<int> local_rank =
      reader.Number("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  const std::optional<int> local_size =
      reader.Number("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  CheckBelow(reader, rank, "OMPI_COMM_WORLD_RANK", size,
             "OMPI_COMM_WORLD_SIZE");
  CheckBelow(reader, local_rank, "OMPI_COMM_WORLD_LOCAL_RANK", local_size,
             "OMPI_COMM_WORLD_LOCAL_SIZE");
  CheckAtMost(reader, local_size, "OMPI_COMM_WORLD_LOCAL_SIZE", size,
              "OMPI_COMM_WORLD_SIZE");
  if (absl::Status s = reader.Result(
          "Open MPI", "start each process with mpirun, which sets them");
      !s.ok()) {
    return s;
  }
  LaunchEnvironment launch;
  launch.scheduler = Scheduler::kOpenMpi;
  launch.rank = *rank;
  launch.num_tasks = *size;
  launch.local_rank = *local_rank;
  launch.local_num_tasks = *local_size;
  return launch;
}

}  // namespace

const char* SchedulerName(Scheduler scheduler) {
  switch (scheduler) {
    case Scheduler::kSlurm:
      return "Slurm";
    case Scheduler::kOpenMpi:
      return "Open MPI";
  }
  return "unknown";
}

absl::StatusOr<std::optional<LaunchEnvironment>> ReadLaunchEnvironment(
    absl::FunctionRef<const char*(const char*)> lookup) {
  absl::StatusOr<LaunchEnvironment> launch;
  if (AnySet(lookup, kOpenMpiVariables)) {
    launch = ReadOpenMpi(lookup);
  } else if (AnySet(lookup, kSlurmVariables)) {
    launch = ReadSlurm(lookup);
  } else {
    return std::nullopt;
  }
  if (!launch.ok()) return launch.status();
  return *std::move(launch);
}

}  // namespace ps
