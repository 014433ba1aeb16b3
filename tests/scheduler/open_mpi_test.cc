// Debian's Open MPI mpirun: each process learns its place through the
// client library, and a half-set environment is the library's clear error.
// Skips (saying why) where mpirun is not installed.

#include "tests/scheduler/open_mpi.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/subprocess.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/scheduler/scheduler_testing.h"

namespace ps::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::StartsWith;

// Bounds a hang only.
constexpr absl::Duration kTimeout = absl::Seconds(120);

// Runs `mpirun -np NUM_PROCESSES ARGV...` to its end, with the servers'
// variables the client library wants beside the ranks (no server is
// reached).
ExitStatus Mpirun(int num_processes, std::vector<std::string> argv) {
  SubprocessOptions options =
      MpirunOptions("mpirun", num_processes, std::move(argv));
  options.env.push_back({"PS_SERVERS", "127.0.0.1:1"});
  options.env.push_back({"PS_NUM_SERVERS", "1"});
  return RunToEnd(std::move(options), kTimeout);
}

class OpenMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = WhyMpirunUnavailable(); !why.empty()) {
      GTEST_SKIP() << "no Open MPI here: " << why;
    }
  }
};

TEST_F(OpenMpiTest, EachProcessOfMpirunIsOneWorkerOfTheJob) {
  const std::string out = FreshTestDir("places");
  const ExitStatus exit =
      Mpirun(3, {RunfilePath("tests/scheduler/place_program"), out});
  EXPECT_TRUE(exit.success()) << exit.ToString();
  EXPECT_THAT(FilesIn(out), ElementsAre(Pair("place-0", "0 3 0 3"),
                                        Pair("place-1", "1 3 1 3"),
                                        Pair("place-2", "2 3 2 3")));
}

TEST_F(OpenMpiTest, AHalfSetEnvironmentIsAnErrorNamingWhatIsMissing) {
  const std::string out = FreshTestDir("errors");
  const ExitStatus exit =
      Mpirun(2, {"/usr/bin/env", "-u", "OMPI_COMM_WORLD_LOCAL_SIZE",
                 RunfilePath("tests/scheduler/place_program"), out});
  EXPECT_FALSE(exit.success());
  // mpirun stops the job at the first failure: a second process may have
  // been stopped before it wrote.
  const std::map<std::string, std::string> files = FilesIn(out);
  ASSERT_FALSE(files.empty());
  for (const auto& [name, message] : files) {
    EXPECT_THAT(name, StartsWith("error-"));
    EXPECT_THAT(message, HasSubstr("$OMPI_COMM_WORLD_LOCAL_SIZE is not set "
                                   "(start each process with mpirun"));
  }
}

}  // namespace
}  // namespace ps::testing
