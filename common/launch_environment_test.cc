#include "common/launch_environment.h"

#include <map>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

using Variables = std::map<std::string, std::string>;

absl::StatusOr<std::optional<LaunchEnvironment>> Read(
    const Variables& variables) {
  return ReadLaunchEnvironment([&](const char* name) -> const char* {
    auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  });
}

// Task 5 of 8 under srun, on the second of three nodes (3 tasks there).
Variables SlurmTask() {
  return {
      {"SLURM_PROCID", "5"},
      {"SLURM_NTASKS", "8"},
      {"SLURM_LOCALID", "2"},
      {"SLURM_NODEID", "1"},
      {"SLURM_NNODES", "3"},
      {"SLURM_STEP_NODELIST", "node[01-02],gpu7"},
      {"SLURM_STEP_TASKS_PER_NODE", "3(x2),2"},
      {"SLURM_JOB_ID", "4242"},
  };
}

// Rank 3 of 4 under mpirun, two per node.
Variables OpenMpiProcess() {
  return {
      {"OMPI_COMM_WORLD_RANK", "3"},       {"OMPI_COMM_WORLD_SIZE", "4"},
      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
      {"OMPI_COMM_WORLD_NODE_RANK", "1"},
  };
}

std::string ErrorOf(const Variables& variables) {
  absl::StatusOr<std::optional<LaunchEnvironment>> read = Read(variables);
  EXPECT_FALSE(read.ok());
  if (read.ok()) return "";
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(read.status().message());
}

TEST(LaunchEnvironmentTest, NoSchedulerIsNoLaunchEnvironment) {
  absl::StatusOr<std::optional<LaunchEnvironment>> read =
      Read({{"PS_RANK", "0"}, {"SLURM_CONF", "/etc/slurm.conf"}});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_FALSE(read->has_value());
}

TEST(LaunchEnvironmentTest, ReadsASlurmTask) {
  absl::StatusOr<std::optional<LaunchEnvironment>> read = Read(SlurmTask());
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_value());
  const LaunchEnvironment& launch = **read;
  EXPECT_EQ(launch.scheduler, Scheduler::kSlurm);
  EXPECT_EQ(launch.rank, 5);
  EXPECT_EQ(launch.num_tasks, 8);
  EXPECT_EQ(launch.local_rank, 2);
  EXPECT_EQ(launch.local_num_tasks, 3);
  EXPECT_EQ(launch.node_rank, 1);
  EXPECT_EQ(launch.num_nodes, 3);
  EXPECT_THAT(launch.nodes, ElementsAre("node01", "node02", "gpu7"));
  EXPECT_EQ(launch.job_id, "4242");
}

TEST(LaunchEnvironmentTest, TheLastNodesCountIsItsOwn) {
  Variables variables = SlurmTask();
  variables["SLURM_PROCID"] = "7";
  variables["SLURM_NODEID"] = "2";
  variables["SLURM_LOCALID"] = "1";
  absl::StatusOr<std::optional<LaunchEnvironment>> read = Read(variables);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)->local_num_tasks, 2);
}

TEST(LaunchEnvironmentTest, ReadsAnOpenMpiProcess) {
  absl::StatusOr<std::optional<LaunchEnvironment>> read =
      Read(OpenMpiProcess());
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_value());
  const LaunchEnvironment& launch = **read;
  EXPECT_EQ(launch.scheduler, Scheduler::kOpenMpi);
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.num_tasks, 4);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.local_num_tasks, 2);
  EXPECT_EQ(launch.node_rank, -1);
  EXPECT_EQ(launch.num_nodes, 0);
  EXPECT_TRUE(launch.nodes.empty());
  EXPECT_EQ(launch.job_id, "");
}

TEST(LaunchEnvironmentTest, MpirunInsideASlurmAllocationIsOpenMpi) {
  Variables variables = OpenMpiProcess();
  // What an sbatch script's processes inherit: not a step's variables.
  variables["SLURM_JOB_ID"] = "77";
  variables["SLURM_NNODES"] = "2";
  variables["SLURM_PROCID"] = "0";
  absl::StatusOr<std::optional<LaunchEnvironment>> read = Read(variables);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)->scheduler, Scheduler::kOpenMpi);
  EXPECT_EQ((*read)->rank, 3);
}

TEST(LaunchEnvironmentTest, HalfASlurmEnvironmentNamesEveryMissingVariable) {
  // An sbatch script itself: the job's variables, not a step's.
  const std::string error = ErrorOf({{"SLURM_JOB_ID", "77"},
                                     {"SLURM_NNODES", "2"},
                                     {"SLURM_NODEID", "0"},
                                     {"SLURM_PROCID", "0"}});
  EXPECT_THAT(error, HasSubstr("Slurm"));
  EXPECT_THAT(error, HasSubstr("$SLURM_NTASKS, $SLURM_LOCALID, "
                               "$SLURM_STEP_NODELIST, "
                               "$SLURM_STEP_TASKS_PER_NODE are not set"));
  EXPECT_THAT(error, HasSubstr("srun"));
  EXPECT_THAT(error, Not(HasSubstr("$SLURM_JOB_ID")));
}

TEST(LaunchEnvironmentTest, HalfAnOpenMpiEnvironmentNamesEveryMissingOne) {
  const std::string error = ErrorOf({{"OMPI_COMM_WORLD_RANK", "1"}});
  EXPECT_THAT(error, HasSubstr("Open MPI"));
  EXPECT_THAT(error, HasSubstr("$OMPI_COMM_WORLD_SIZE, "
                               "$OMPI_COMM_WORLD_LOCAL_RANK, "
                               "$OMPI_COMM_WORLD_LOCAL_SIZE are not set"));
  EXPECT_THAT(error, HasSubstr("mpirun"));
}

TEST(LaunchEnvironmentTest, NamesEveryBadValueAtOnce) {
  Variables variables = SlurmTask();
  variables["SLURM_PROCID"] = "x";
  variables["SLURM_NTASKS"] = "0";
  variables["SLURM_LOCALID"] = "-1";
  variables["SLURM_STEP_NODELIST"] = "node[2-1]";
  variables["SLURM_JOB_ID"] = "a b";
  const std::string error = ErrorOf(variables);
  EXPECT_THAT(
      error,
      AllOf(HasSubstr("$SLURM_PROCID must be a number"), HasSubstr("got 'x'"),
            HasSubstr("$SLURM_NTASKS must be a number in [1, "),
            HasSubstr("$SLURM_LOCALID must be a number"),
            HasSubstr("$SLURM_STEP_NODELIST: host list 'node[2-1]'"),
            HasSubstr("$SLURM_JOB_ID: 'a b' is not a job id")));
}

TEST(LaunchEnvironmentTest, NamesEveryContradictionAtOnce) {
  Variables variables = SlurmTask();
  variables["SLURM_PROCID"] = "8";
  variables["SLURM_NODEID"] = "3";
  variables["SLURM_STEP_NODELIST"] = "node[01-04]";
  variables["SLURM_STEP_TASKS_PER_NODE"] = "3(x2),1";
  const std::string error = ErrorOf(variables);
  EXPECT_THAT(
      error,
      AllOf(HasSubstr("$SLURM_PROCID (8) must be below $SLURM_NTASKS (8)"),
            HasSubstr("$SLURM_NODEID (3) must be below $SLURM_NNODES (3)"),
            HasSubstr("$SLURM_STEP_NODELIST names 4 nodes but $SLURM_NNODES "
                      "is 3"),
            HasSubstr("$SLURM_STEP_TASKS_PER_NODE adds up to 7 tasks but "
                      "$SLURM_NTASKS is 8")));
}

TEST(LaunchEnvironmentTest, SlurmCountsMustAgree) {
  Variables variables = SlurmTask();
  variables["SLURM_STEP_TASKS_PER_NODE"] = "4(x2)";
  EXPECT_THAT(ErrorOf(variables),
              HasSubstr("$SLURM_STEP_TASKS_PER_NODE counts 2 nodes but "
                        "$SLURM_NNODES is 3"));

  variables = SlurmTask();
  variables["SLURM_LOCALID"] = "3";
  EXPECT_THAT(ErrorOf(variables),
              HasSubstr("$SLURM_LOCALID (3) must be below "
                        "$SLURM_STEP_TASKS_PER_NODE of this node (3)"));

  variables = SlurmTask();
  variables["SLURM_NNODES"] = "9";
  EXPECT_THAT(ErrorOf(variables),
              HasSubstr("$SLURM_NNODES (9) must not exceed $SLURM_NTASKS (8)"));
}

TEST(LaunchEnvironmentTest, OpenMpiCountsMustAgree) {
  Variables variables = OpenMpiProcess();
  variables["OMPI_COMM_WORLD_RANK"] = "4";
  variables["OMPI_COMM_WORLD_LOCAL_RANK"] = "2";
  variables["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  std::string error = ErrorOf(variables);
  EXPECT_THAT(error, HasSubstr("$OMPI_COMM_WORLD_RANK (4) must be below "
                               "$OMPI_COMM_WORLD_SIZE (4)"));
  EXPECT_THAT(error, HasSubstr("$OMPI_COMM_WORLD_LOCAL_RANK (2) must be "
                               "below $OMPI_COMM_WORLD_LOCAL_SIZE (2)"));

  variables = OpenMpiProcess();
  variables["OMPI_COMM_WORLD_LOCAL_SIZE"] = "5";
  variables["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  EXPECT_THAT(ErrorOf(variables),
              HasSubstr("$OMPI_COMM_WORLD_LOCAL_SIZE (5) must not exceed "
                        "$OMPI_COMM_WORLD_SIZE (4)"));
}

TEST(LaunchEnvironmentTest, SchedulerNames) {
  EXPECT_STREQ(SchedulerName(Scheduler::kSlurm), "Slurm");
  EXPECT_STREQ(SchedulerName(Scheduler::kOpenMpi), "Open MPI");
}

}  // namespace
}  // namespace ps
