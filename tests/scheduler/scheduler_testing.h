#ifndef PS_TESTS_SCHEDULER_SCHEDULER_TESTING_H_
#define PS_TESTS_SCHEDULER_SCHEDULER_TESTING_H_

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"

namespace ps::testing {

// Helpers of the scheduler tests.

// What the tasks of a scheduler's job wrote to `dir`: each file's name and
// its contents (tests/scheduler/place_program.cc, torch_program.py).
inline std::map<std::string, std::string> FilesIn(const std::string& dir) {
  std::map<std::string, std::string> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    std::ifstream in(entry.path());
    files[entry.path().filename()] = std::string(
        std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return files;
}

// Runs a job's command (srun, sbatch, mpirun) to its end: how it ended, or
// a test failure and Exited(-1) when it cannot start or outlives `timeout`
// (it is then killed with its process group).
inline ExitStatus RunToEnd(SubprocessOptions options, absl::Duration timeout) {
  const std::string name = options.name;
  absl::StatusOr<std::unique_ptr<Subprocess>> job =
      Subprocess::Start(std::move(options));
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return ExitStatus::Exited(-1);
  const std::optional<ExitStatus> exit = (*job)->WaitFor(timeout);
  EXPECT_TRUE(exit.has_value()) << name << " still runs";
  return exit.value_or(ExitStatus::Exited(-1));
}

}  // namespace ps::testing

#endif  // PS_TESTS_SCHEDULER_SCHEDULER_TESTING_H_
