#include "deploy/local/run_setup.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::UnusedTestPath;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// A few of the launcher's flags, as launch_main defines them.
RunSettings Settings() {
  RunSettings settings;
  for (const char* name : {"resume", "extend", "run_dir", "job_id", "model"}) {
    settings.Define(name, RunSettings::Type::kString, "");
  }
  settings.Define("epochs", RunSettings::Type::kInt, "10");
  settings.Define("learning_rate", RunSettings::Type::kDouble, "0");
  return settings;
}

LaunchConfig Config(const std::string& checkpoint_dir) {
  LaunchConfig config;
  config.job_id = "job-1";
  config.checkpoint_dir = checkpoint_dir;
  return config;
}

// A run as a launcher left it, in `dir`.
void WriteRun(const std::string& dir, const std::string& state) {
  RunRecord record;
  record.job_id = "job-0";
  record.state = state;
  record.outcome = "x";
  record.flags = {{"epochs", "5"}, {"model", "mlp"}};
  record.segments = {{"start", "t", {}, absl::StrCat(state, ": x")}};
  absl::StatusOr<std::unique_ptr<RunDirectory>> run = RunDirectory::Create(dir);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE((*run)->Write(record).ok());
}

RunRecord ReadRun(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<RunDirectory>> run = RunDirectory::Open(dir);
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return {};
  absl::StatusOr<RunRecord> record = (*run)->Read();
  EXPECT_TRUE(record.ok()) << record.status();
  return record.ok() ? *record : RunRecord();
}

TEST(RunSetupTest, AStartRecordsTheCommandLinesSettings) {
  const std::string dir = UnusedTestPath("start");
  RunSettings settings = Settings();
  ASSERT_TRUE(settings.Set("run_dir", dir).ok());
  ASSERT_TRUE(settings.Set("epochs", "3").ok());
  absl::StatusOr<RunSetup> setup =
      RunSetup::Plan(settings, {"run_dir", "epochs"}, {}, "/cwd", absl::Now());
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->kind(), LaunchKind::kStart);
  EXPECT_EQ(setup->path(), dir);
  EXPECT_FALSE(setup->extended());
  EXPECT_FALSE(std::filesystem::exists(dir));  // Not before Begin.
  ASSERT_TRUE(setup->Begin(Config(dir + "/checkpoints"), absl::Now()).ok());
  setup = absl::InternalError("released");  // Lets go of the lock.
  const RunRecord record = ReadRun(dir);
  EXPECT_EQ(record.job_id, "job-1");
  EXPECT_EQ(record.state, "running");
  EXPECT_THAT(record.flags, ElementsAre(Pair("model", ""), Pair("epochs", "3"),
                                        Pair("learning_rate", "0")));
  ASSERT_EQ(record.segments.size(), 1u);
  EXPECT_EQ(record.segments[0].kind, "start");
}

TEST(RunSetupTest, AResumeTakesTheRunsSettingsAndJobId) {
  const std::string dir = UnusedTestPath("resume");
  WriteRun(dir, "stopped");
  RunSettings settings = Settings();
  ASSERT_TRUE(settings.Set("resume", dir).ok());
  absl::StatusOr<RunSetup> setup =
      RunSetup::Plan(settings, {"resume"}, {}, "/cwd", absl::Now());
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->kind(), LaunchKind::kResume);
  EXPECT_EQ(setup->settings().Get<int>("epochs"), 5);
  EXPECT_EQ(setup->settings().Text("model"), "mlp");
  EXPECT_EQ(setup->settings().Text("job_id"), "job-0");
  // The caller's settings are left as they were.
  EXPECT_EQ(settings.Get<int>("epochs"), 10);
  ASSERT_TRUE(setup->Begin(Config(""), absl::Now()).ok());
  EXPECT_THAT(setup->OpeningLines(Config("")),
              ElementsAre(HasSubstr("resuming run ")));
  setup = absl::InternalError("released");
  const RunRecord record = ReadRun(dir);
  EXPECT_EQ(record.state, "running");
  ASSERT_EQ(record.segments.size(), 2u);
  EXPECT_EQ(record.segments[1].kind, "resume");
}

TEST(RunSetupTest, RefusesWhatCannotBeResumed) {
  const std::string dir = UnusedTestPath("finished");
  WriteRun(dir, "finished");
  RunSettings settings = Settings();
  ASSERT_TRUE(settings.Set("resume", dir).ok());
  absl::Status finished =
      RunSetup::Plan(settings, {"resume"}, {}, "/cwd", absl::Now()).status();
  EXPECT_EQ(finished.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(finished.message(),
              HasSubstr("already finished (x): nothing to resume. To train "
                        "it further: --extend="));
  EXPECT_THAT(finished.message(), HasSubstr("(N > 5,"));
  EXPECT_THAT(
      RunSetup::Plan(settings, {"resume", "epochs"}, {}, "/cwd", absl::Now())
          .status()
          .message(),
      HasSubstr("already finished"));
  EXPECT_THAT(
      RunSetup::Plan(settings, {"resume", "run_dir"}, {}, "/cwd", absl::Now())
          .status()
          .message(),
      HasSubstr("--resume names the run's directory: no --run_dir"));
  ASSERT_TRUE(settings.Set("extend", dir).ok());
  EXPECT_THAT(
      RunSetup::Plan(settings, {"resume", "extend"}, {}, "/cwd", absl::Now())
          .status()
          .message(),
      HasSubstr("--resume and --extend both name a run"));
}

TEST(RunSetupTest, AnExtensionChangesFlagsAndKeepsTheCheckpoints) {
  const std::string dir = UnusedTestPath("extend");
  WriteRun(dir, "finished");
  const std::string checkpoints = dir + "/checkpoints";
  std::filesystem::create_directories(checkpoints);
  std::ofstream(checkpoints + "/shard-0-15.ckpt") << "fifteen";
  RunSettings settings = Settings();
  ASSERT_TRUE(settings.Set("extend", dir).ok());
  ASSERT_TRUE(settings.Set("epochs", "8").ok());
  absl::StatusOr<RunSetup> setup =
      RunSetup::Plan(settings, {"extend", "epochs"}, {}, "/cwd", absl::Now());
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->kind(), LaunchKind::kExtend);
  EXPECT_TRUE(setup->extended());
  ASSERT_EQ(setup->changes().size(), 1u);
  EXPECT_EQ(setup->changes()[0].from, "5");
  EXPECT_EQ(setup->settings().Get<int>("epochs"), 8);
  EXPECT_EQ(setup->Begin(Config(""), absl::Now()).code(),
            absl::StatusCode::kInvalidArgument);  // --nocheckpoints.
  ASSERT_TRUE(setup->Begin(Config(checkpoints), absl::Now()).ok());
  EXPECT_EQ(setup->kept_dir(), checkpoints + "/before-segment-2");
  EXPECT_TRUE(std::filesystem::exists(checkpoints +
                                      "/before-segment-2/shard-0-15.ckpt"));
  EXPECT_THAT(setup->OpeningLines(Config(checkpoints)),
              ElementsAre(HasSubstr("extending run "),
                          HasSubstr("with --epochs=8 (was 5)")));
  setup = absl::InternalError("released");
  const RunRecord record = ReadRun(dir);
  ASSERT_EQ(record.segments.size(), 2u);
  EXPECT_EQ(record.segments[1].kind, "extend");
  EXPECT_THAT(record.segments[1].flags, ElementsAre(Pair("epochs", "8")));
}

TEST(RunSetupTest, AnExtensionWithoutCheckpointsIsRefused) {
  const std::string dir = UnusedTestPath("extend-empty");
  WriteRun(dir, "stopped");
  RunSettings settings = Settings();
  ASSERT_TRUE(settings.Set("extend", dir).ok());
  ASSERT_TRUE(settings.Set("epochs", "6").ok());
  absl::StatusOr<RunSetup> setup =
      RunSetup::Plan(settings, {"extend", "epochs"}, {}, "/cwd", absl::Now());
  ASSERT_TRUE(setup.ok()) << setup.status();
  const absl::Status begun = setup->Begin(Config(dir + "/none"), absl::Now());
  EXPECT_EQ(begun.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(begun.message(), HasSubstr("there is nothing to extend"));
}

TEST(RunSetupTest, AProgramRunCannotBeExtended) {
  const std::string dir = UnusedTestPath("program");
  {
    absl::StatusOr<std::unique_ptr<RunDirectory>> run =
        RunDirectory::Create(dir);
    ASSERT_TRUE(run.ok()) << run.status();
    RunRecord record;
    record.job_id = "j";
    record.state = "stopped";
    record.program = {"/bin/true"};
    ASSERT_TRUE((*run)->Write(record).ok());
  }
  RunSettings settings = Settings();
  ASSERT_TRUE(settings.Set("extend", dir).ok());
  EXPECT_THAT(RunSetup::Plan(settings, {"extend"}, {}, "/cwd", absl::Now())
                  .status()
                  .message(),
              HasSubstr("the launcher cannot extend it"));
  ASSERT_TRUE(settings.Set("extend", "").ok());
  ASSERT_TRUE(settings.Set("resume", dir).ok());
  EXPECT_THAT(
      RunSetup::Plan(settings, {"resume"}, {"/bin/false"}, "/cwd", absl::Now())
          .status()
          .message(),
      HasSubstr("--resume runs the run's own program: give none after --"));
  absl::StatusOr<RunSetup> setup =
      RunSetup::Plan(settings, {"resume"}, {}, "/cwd", absl::Now());
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->program(), std::vector<std::string>({"/bin/true"}));
}

}  // namespace
}  // namespace ps
