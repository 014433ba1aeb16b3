// The main job's training under the schedulers HPC clusters run, one worker
// per task, with the servers started by the test as a job script starts
// them: our worker binary (--rank=-1) and a PyTorch program on
// paramserver.torch, each under Debian's real Slurm (`srun -n 2`) and Open
// MPI (`mpirun -np 2`). Results are judged by exit codes and the files the
// job writes (the worker's saved model, the PyTorch program's weights).
// Skips (saying why) where the scheduler is not there.

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/subprocess.h"
#include "common/temp_dir_testing.h"
#include "deploy/local/launch_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu_backend.h"
#include "tests/cluster_runner.h"
#include "tests/scheduler/open_mpi.h"
#include "tests/scheduler/scheduler_testing.h"
#include "tests/scheduler/slurm_cluster.h"
#include "worker/idx_reader.h"
#include "worker/nn/model_description.h"
#include "worker/predict.h"

namespace ps::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::Key;

// Bounds a hang only: each job takes seconds.
constexpr absl::Duration kTimeout = absl::Seconds(300);
constexpr int kWorkers = 2;

enum class Launcher { kSrun, kMpirun };

std::string LauncherName(const ::testing::TestParamInfo<Launcher>& info) {
  return info.param == Launcher::kSrun ? "Srun" : "Mpirun";
}

class SchedulerTrainingTest : public ::testing::TestWithParam<Launcher> {
 protected:
  void SetUp() override {
    if (GetParam() == Launcher::kSrun) {
      if (const std::string why = SlurmCluster::WhyUnavailable();
          !why.empty()) {
        GTEST_SKIP() << "no Slurm here: " << why;
      }
      absl::StatusOr<std::unique_ptr<SlurmCluster>> slurm =
          SlurmCluster::Start();
      ASSERT_TRUE(slurm.ok()) << slurm.status();
      slurm_ = *std::move(slurm);
    } else if (const std::string why = WhyMpirunUnavailable(); !why.empty()) {
      GTEST_SKIP() << "no Open MPI here: " << why;
    }
  }

  // Starts the job's two server shards (for kWorkers workers) as
  // `config` says, on ports they pick.
  void StartServers(LaunchConfig config) {
    config.server_binary = RunfilePath("server/server");
    config.num_servers = 2;
    config.num_workers = kWorkers;
    config.mode = "sync";
    for (int index = 0; index < config.num_servers; ++index) {
      const std::string port_file =
          UnusedTestPath(absl::StrCat("server-", index, ".port"));
      absl::StatusOr<std::unique_ptr<Subprocess>> server = Subprocess::Start(
          TestProcessOptions(absl::StrCat("server ", index),
                             ServerArgv(config, index, port_file)));
      ASSERT_TRUE(server.ok()) << server.status();
      servers_.push_back(*std::move(server));
      absl::StatusOr<int> port =
          WaitForPortFile(port_file, kTimeout, servers_.back().get());
      ASSERT_TRUE(port.ok()) << port.status();
      addresses_.push_back(absl::StrCat("127.0.0.1:", *port));
    }
  }

  // Runs ARGV as kWorkers tasks of the scheduler under test, with `env`
  // added, to its end.
  ExitStatus RunJob(std::vector<std::string> argv,
                    std::vector<std::pair<std::string, std::string>> env) {
    SubprocessOptions options =
        GetParam() == Launcher::kSrun
            ? slurm_->SrunOptions("srun", kWorkers, std::move(argv))
            : MpirunOptions("mpirun", kWorkers, std::move(argv));
    options.env.insert(options.env.end(), env.begin(), env.end());
    return RunToEnd(std::move(options), kTimeout);
  }

  std::unique_ptr<SlurmCluster> slurm_;
  // After slurm_: destroyed first, as a job script ends its servers.
  std::vector<std::unique_ptr<Subprocess>> servers_;
  std::vector<std::string> addresses_;
};

// The test split's accuracy of the MLP model file `path`.
double AccuracyOf(const std::string& path) {
  absl::StatusOr<worker::nn::ModelDescription> description =
      worker::nn::ModelDescription::Parse("784-256-128-10");
  EXPECT_TRUE(description.ok()) << description.status();
  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateCpuBackend();
  EXPECT_TRUE(backend.ok()) << backend.status();
  absl::StatusOr<worker::LabeledImages> test = worker::LoadFashionMnist(
      "/usr/share/datasets/fashion-mnist", worker::Split::kTest);
  EXPECT_TRUE(test.ok()) << test.status();
  if (!description.ok() || !backend.ok() || !test.ok()) return -1;
  absl::StatusOr<std::unique_ptr<worker::nn::Model>> model =
      worker::LoadTrainedModel(*description, path, 256, backend->get());
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return -1;
  absl::StatusOr<double> accuracy = worker::Accuracy(**model, *test);
  EXPECT_TRUE(accuracy.ok()) << accuracy.status();
  return accuracy.value_or(-1);
}

TEST_P(SchedulerTrainingTest, OurWorkerTakesItsRankFromTheSchedulerAndTrains) {
  LaunchConfig config;
  config.optimizer = "sgd";
  config.learning_rate = 0.05;
  ASSERT_NO_FATAL_FAILURE(StartServers(config));
  const std::string model = UnusedTestPath("model");
  // No --num_workers: the task count is the number of workers.
  const ExitStatus exit = RunJob(
      {RunfilePath("worker/worker"), "--rank=-1",
       absl::StrCat("--servers=", absl::StrJoin(addresses_, ",")),
       "--batch_size=32", "--epochs=1", "--max_steps=40", "--device=cpu",
       "--mode=sync", "--log_every=20", absl::StrCat("--save_model=", model)},
      {});
  ASSERT_TRUE(exit.success()) << exit.ToString();
  // A sync step needs both ranks' pushes: finishing proves two ranks. And
  // it trained: well above chance (0.1) after 40 steps.
  EXPECT_GT(AccuracyOf(model), 0.3);
}

TEST_P(SchedulerTrainingTest, OurWorkerRefusesAHalfSetEnvironment) {
  // A wrapper that drops one of the scheduler's variables: the worker
  // exits as for bad configuration before it reaches any server.
  const char* dropped = GetParam() == Launcher::kSrun
                            ? "SLURM_NTASKS"
                            : "OMPI_COMM_WORLD_LOCAL_SIZE";
  const ExitStatus exit =
      RunJob({"/usr/bin/env", "-u", dropped, RunfilePath("worker/worker"),
              "--rank=-1", "--servers=127.0.0.1:1", "--device=cpu"},
             {});
  EXPECT_EQ(exit, ExitStatus::Exited(kExitBadConfig)) << exit.ToString();
}

// One task's report (torch_program.py): rank and size, the weights after
// the broadcast and at the end.
struct TorchReport {
  std::string place;
  std::string initial;
  std::string final;
};

TEST_P(SchedulerTrainingTest, APyTorchProgramTakesItsRankFromTheScheduler) {
  // No optimizer flag: the servers take the one the program declares.
  ASSERT_NO_FATAL_FAILURE(StartServers(LaunchConfig()));
  const std::string out = FreshTestDir("torch");
  const ExitStatus exit =
      RunJob({"/usr/bin/python3",
              RunfilePath("tests/scheduler/torch_program.py"), out},
             {{"PS_SERVERS", absl::StrJoin(addresses_, ",")},
              {"PS_NUM_SERVERS", absl::StrCat(addresses_.size())},
              {"PYTHONPATH", RunfilePath("python/site")},
              {"PYTHONDONTWRITEBYTECODE", "1"},
              {"OMP_NUM_THREADS", "1"}});
  ASSERT_TRUE(exit.success()) << exit.ToString();
  const std::map<std::string, std::string> files = FilesIn(out);
  ASSERT_THAT(files, ElementsAre(Key("rank-0"), Key("rank-1")));
  std::vector<TorchReport> reports;
  for (const auto& [name, text] : files) {
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    ASSERT_GE(lines.size(), 3u) << name << ": " << text;
    reports.push_back({lines[0], lines[1], lines[2]});
  }
  EXPECT_EQ(reports[0].place, "0 2");
  EXPECT_EQ(reports[1].place, "1 2");
  // Sync: both ranks end with the servers' weights, bit for bit, and the
  // steps changed them.
  EXPECT_EQ(reports[0].final, reports[1].final);
  EXPECT_NE(reports[0].final, reports[0].initial);
}

// examples/slurm/train.sbatch, as the README gives it, under sbatch: the
// script starts the servers and srun the workers.
TEST(SbatchExampleTest, TheReadmesJobScriptTrainsTheMainJob) {
  if (const std::string why = SlurmCluster::WhyUnavailable(); !why.empty()) {
    GTEST_SKIP() << "no Slurm here: " << why;
  }
  absl::StatusOr<std::unique_ptr<SlurmCluster>> slurm = SlurmCluster::Start();
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  const std::string output = UnusedTestPath("job.out");
  const std::string model = UnusedTestPath("model");
  SubprocessOptions options = TestProcessOptions(
      "sbatch", {SlurmCluster::Command("sbatch"), "--wait", "--ntasks=2",
                 absl::StrCat("--output=", output),
                 RunfilePath("examples/slurm/train.sbatch"), "--batch_size=32",
                 "--epochs=1", "--max_steps=40", "--device=cpu",
                 absl::StrCat("--save_model=", model)});
  options.env = (*slurm)->ClientEnvironment();
  options.env.push_back({"PS_SERVER", RunfilePath("server/server")});
  options.env.push_back({"PS_WORKER", RunfilePath("worker/worker")});
  const ExitStatus exit = RunToEnd(std::move(options), kTimeout);
  std::ifstream job_output(output);
  const std::string printed((std::istreambuf_iterator<char>(job_output)),
                            std::istreambuf_iterator<char>());
  // sbatch --wait exits as the job did.
  ASSERT_TRUE(exit.success()) << exit.ToString() << "; the job printed:\n"
                              << printed;
  EXPECT_GT(AccuracyOf(model), 0.3);
}

INSTANTIATE_TEST_SUITE_P(Schedulers, SchedulerTrainingTest,
                         ::testing::Values(Launcher::kSrun, Launcher::kMpirun),
                         LauncherName);

}  // namespace
}  // namespace ps::testing
