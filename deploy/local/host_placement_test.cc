#include "deploy/local/host_placement.h"

#include <map>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// An environment of the given variables only.
class Env {
 public:
  explicit Env(std::map<std::string, std::string> variables)
      : variables_(std::move(variables)) {}
  const char* operator()(const char* name) const {
    const auto it = variables_.find(name);
    return it == variables_.end() ? nullptr : it->second.c_str();
  }

 private:
  std::map<std::string, std::string> variables_;
};

const Env kNone({});

TEST(HostPlacementTest, NothingGivenIsOneHost) {
  absl::StatusOr<HostPlacement> placement =
      ResolveHostPlacement(std::nullopt, std::nullopt, "", kNone);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->num_hosts, 1);
  EXPECT_EQ(placement->host_index, 0);
  EXPECT_EQ(placement->rendezvous, "");
}

TEST(HostPlacementTest, FlagsGiveEverything) {
  absl::StatusOr<HostPlacement> placement =
      ResolveHostPlacement(3, 2, "10.0.0.1:29400", kNone);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->num_hosts, 3);
  EXPECT_EQ(placement->host_index, 2);
  EXPECT_EQ(placement->rendezvous, "10.0.0.1:29400");
  EXPECT_EQ(placement->source, "flags");
}

TEST(HostPlacementTest, BadFlagsAreNamed) {
  EXPECT_THAT(
      ResolveHostPlacement(0, std::nullopt, "", kNone).status().message(),
      HasSubstr("--num_hosts must be in [1, 4096], got 0"));
  EXPECT_THAT(ResolveHostPlacement(2, 2, "h:1", kNone).status().message(),
              HasSubstr("--host_index must be in [0, --num_hosts) = [0, 2), "
                        "got 2"));
  EXPECT_THAT(ResolveHostPlacement(2, -1, "h:1", kNone).status().message(),
              HasSubstr("--host_index"));
  EXPECT_THAT(
      ResolveHostPlacement(2, std::nullopt, "h:1", kNone).status().message(),
      HasSubstr("needs --host_index"));
  EXPECT_THAT(ResolveHostPlacement(2, 1, "", kNone).status().message(),
              HasSubstr("needs --rendezvous=HOST:PORT"));
  EXPECT_THAT(
      ResolveHostPlacement(2, 1, "nohostport", kNone).status().message(),
      HasSubstr("--rendezvous must be HOST:PORT"));
  EXPECT_THAT(ResolveHostPlacement(2, 1, "h:70000", kNone).status().message(),
              HasSubstr("--rendezvous must be HOST:PORT"));
}

const Env kSlurmNode1({{"SLURM_PROCID", "1"},
                       {"SLURM_NTASKS", "2"},
                       {"SLURM_LOCALID", "0"},
                       {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
                       {"SLURM_NODEID", "1"},
                       {"SLURM_NNODES", "2"},
                       {"SLURM_STEP_NODELIST", "node[07-08]"},
                       {"SLURM_JOB_ID", "42"}});

TEST(HostPlacementTest, SlurmGivesHostsIndexAndTheFirstNodesRendezvous) {
  absl::StatusOr<HostPlacement> placement =
      ResolveHostPlacement(std::nullopt, std::nullopt, "", kSlurmNode1);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->num_hosts, 2);
  EXPECT_EQ(placement->host_index, 1);
  EXPECT_EQ(placement->rendezvous, "node07:29400");
  EXPECT_EQ(placement->source, "Slurm");
  // A flag wins.
  absl::StatusOr<HostPlacement> moved = ResolveHostPlacement(
      std::nullopt, std::nullopt, "node08:1234", kSlurmNode1);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->rendezvous, "node08:1234");
}

TEST(HostPlacementTest, SeveralLaunchTasksOnANodeAreRefused) {
  const Env two_per_node({{"SLURM_PROCID", "1"},
                          {"SLURM_NTASKS", "2"},
                          {"SLURM_LOCALID", "1"},
                          {"SLURM_STEP_TASKS_PER_NODE", "2"},
                          {"SLURM_NODEID", "0"},
                          {"SLURM_NNODES", "1"},
                          {"SLURM_STEP_NODELIST", "node1"},
                          {"SLURM_JOB_ID", "42"}});
  EXPECT_THAT(ResolveHostPlacement(std::nullopt, std::nullopt, "", two_per_node)
                  .status()
                  .message(),
              HasSubstr("run one per host"));
}

TEST(HostPlacementTest, OpenMpiGivesHostsAndIndexButNeedsTheRendezvous) {
  const Env mpi({{"OMPI_COMM_WORLD_RANK", "1"},
                 {"OMPI_COMM_WORLD_SIZE", "3"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}});
  EXPECT_THAT(ResolveHostPlacement(std::nullopt, std::nullopt, "", mpi)
                  .status()
                  .message(),
              HasSubstr("needs --rendezvous"));
  absl::StatusOr<HostPlacement> placement =
      ResolveHostPlacement(std::nullopt, std::nullopt, "10.0.0.1:5", mpi);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->num_hosts, 3);
  EXPECT_EQ(placement->host_index, 1);
  EXPECT_EQ(placement->source, "Open MPI");
}

TEST(HostPlacementTest, AHalfSetSchedulerEnvironmentIsAnError) {
  const Env half(std::map<std::string, std::string>{{"SLURM_PROCID", "0"}});
  absl::StatusOr<HostPlacement> placement =
      ResolveHostPlacement(std::nullopt, std::nullopt, "", half);
  EXPECT_EQ(placement.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(placement.status().message(), HasSubstr("--num_hosts=1"));
  // --num_hosts given: the environment is not read.
  EXPECT_TRUE(ResolveHostPlacement(1, std::nullopt, "", half).ok());
}

TEST(AddressTowardsTest, LoopbackIsReachedFromLoopback) {
  absl::StatusOr<std::string> address = AddressTowards("127.0.0.1:29400");
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(*address, "127.0.0.1");
  EXPECT_FALSE(AddressTowards("no-such-host.invalid:1").ok());
}

}  // namespace
}  // namespace ps
