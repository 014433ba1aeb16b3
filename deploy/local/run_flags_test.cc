#include "deploy/local/run_flags.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

using Flags = std::vector<std::pair<std::string, std::string>>;

// A few of the launcher's run-defining flags, as launch_main defines them.
RunSettings Settings() {
  RunSettings settings;
  settings.Define("epochs", RunSettings::Type::kInt, "10");
  settings.Define("max_steps", RunSettings::Type::kInt64, "0");
  settings.Define("model", RunSettings::Type::kString, "784-256-128-10");
  settings.Define("learning_rate", RunSettings::Type::kDouble, "0");
  return settings;
}

RunRecord Record(const std::string& state) {
  RunRecord record;
  record.job_id = "j";
  record.state = state;
  record.flags = {{"epochs", "5"},
                  {"max_steps", "0"},
                  {"model", "mlp"},
                  {"learning_rate", "0"}};
  return record;
}

TEST(RunFlagsTest, AnExtensionSetsTheRunsFlagsThenTheChangedOnes) {
  // As parsed from: --extend=DIR --epochs=8 --learning_rate=0.0005 --model=mlp
  RunSettings settings = Settings();
  ASSERT_TRUE(settings.Set("epochs", "8").ok());
  ASSERT_TRUE(settings.Set("learning_rate", "0.0005").ok());
  ASSERT_TRUE(settings.Set("model", "mlp").ok());
  // Not given: the run's value wins.
  ASSERT_TRUE(settings.Set("max_steps", "7").ok());
  RunRecord record = Record("finished");
  record.segments = {{"start", "t", {}, "finished: x"},
                     {"extend", "t", {{"epochs", "6"}}, "finished: y"}};
  absl::StatusOr<std::vector<FlagChange>> changes = ApplyExtension(
      record, {"epochs", "learning_rate", "model"}, "/cwd", &settings);
  ASSERT_TRUE(changes.ok()) << changes.status();
  ASSERT_EQ(changes->size(), 2u);
  EXPECT_EQ((*changes)[0].name, "epochs");
  EXPECT_EQ((*changes)[0].from, "6");  // As the last extension left it.
  EXPECT_EQ((*changes)[0].to, "8");
  EXPECT_EQ((*changes)[1].name, "learning_rate");
  EXPECT_EQ((*changes)[1].from, "0");
  EXPECT_EQ((*changes)[1].to, "0.0005");
  EXPECT_EQ(settings.Get<int>("epochs"), 8);
  EXPECT_EQ(settings.Get<double>("learning_rate"), 0.0005);
  EXPECT_EQ(settings.Get<int64_t>("max_steps"), 0);
  EXPECT_TRUE(
      CheckExtension(record.state, CurrentFlags(record), *changes, "runs/r")
          .ok());
}

TEST(RunFlagsTest, AnExtensionKeepsTheFlagsThatDefineTheState) {
  RunSettings settings = Settings();
  ASSERT_TRUE(settings.Set("model", "cnn").ok());
  const absl::Status refused =
      ApplyExtension(Record("finished"), {"model"}, "/cwd", &settings).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(),
              HasSubstr("--model=cnn: an extended run keeps its --model=mlp, "
                        "since the checkpoints hold the run's model"));
  for (const char* fixed :
       {"num_servers", "num_workers", "model", "batch_size", "mode",
        "staleness", "optimizer", "seed", "data_dir", "checkpoints",
        "checkpoint_dir", "stage_split"}) {
    EXPECT_NE(WhyFixedOnExtend(fixed), nullptr) << fixed;
  }
  for (const char* free : {"epochs", "max_steps", "learning_rate",
                           "lr_schedule", "server_flags", "save_model"}) {
    EXPECT_EQ(WhyFixedOnExtend(free), nullptr) << free;
  }
}

TEST(RunFlagsTest, TheScheduleAndTheSplitOfStagesDefineTheRun) {
  // A resume that fell back to the default split would give each stage's
  // server group tensors it does not hold.
  RunSettings settings;
  settings.Define("pipeline_schedule", RunSettings::Type::kString, "gpipe");
  settings.Define("stage_split", RunSettings::Type::kString, "compute");
  RunRecord record = Record("stopped");
  record.flags = {{"pipeline_schedule", "1f1b"}, {"stage_split", "bytes"}};
  ASSERT_TRUE(ApplyRecordedFlags(record, {}, &settings).ok());
  EXPECT_EQ(settings.Text("pipeline_schedule"), "1f1b");
  EXPECT_EQ(settings.Text("stage_split"), "bytes");
  EXPECT_EQ(CurrentRunFlags(settings, "/cwd"),
            (Flags{{"pipeline_schedule", "1f1b"}, {"stage_split", "bytes"}}));
}

TEST(RunFlagsTest, AResumeNamesTheWayToChangeAFlag) {
  RunSettings settings = Settings();
  EXPECT_THAT(
      ApplyRecordedFlags(Record("stopped"), {"epochs"}, &settings).message(),
      HasSubstr("--extend=DIR goes on with another value"));
  EXPECT_THAT(
      ApplyRecordedFlags(Record("stopped"), {"model"}, &settings).message(),
      HasSubstr("for another value start a new run"));
}

TEST(RunFlagsTest, AResumeSetsTheRunsFlagsInTheSettingsOnly) {
  RunSettings settings = Settings();
  ASSERT_TRUE(ApplyRecordedFlags(Record("stopped"), {}, &settings).ok());
  EXPECT_EQ(settings.Get<int>("epochs"), 5);
  EXPECT_EQ(settings.Text("model"), "mlp");
  RunRecord bad = Record("stopped");
  bad.flags.push_back({"epochs", "many"});
  EXPECT_THAT(ApplyRecordedFlags(bad, {}, &settings).message(),
              HasSubstr("the run's flag --epochs=many: Illegal value"));
  RunRecord unknown = Record("stopped");
  unknown.flags.push_back({"gone", "1"});
  EXPECT_THAT(ApplyRecordedFlags(unknown, {}, &settings).message(),
              HasSubstr("the run's flag --gone is unknown to this launcher"));
}

TEST(RunFlagsTest, AFinishedRunIsExtendedOnlyByALongerPlan) {
  const Flags before = {{"epochs", "5"}, {"max_steps", "0"}};
  auto check = [&](const std::string& state, std::vector<FlagChange> changes,
                   const Flags& flags) {
    return CheckExtension(state, flags, changes, "runs/r");
  };
  EXPECT_TRUE(check("finished", {{"epochs", "5", "6"}}, before).ok());
  EXPECT_THAT(
      check("finished", {{"learning_rate", "0", "0.1"}}, before).message(),
      HasSubstr("the run in runs/r finished the 5 epochs it planned: "
                "extending it needs more, --epochs=N with N > 5"));
  EXPECT_FALSE(check("finished", {{"epochs", "5", "4"}}, before).ok());
  // A run cut short by --max_steps.
  const Flags capped = {{"epochs", "5"}, {"max_steps", "100"}};
  EXPECT_TRUE(check("finished", {{"max_steps", "100", "200"}}, capped).ok());
  EXPECT_TRUE(check("finished", {{"max_steps", "100", "0"}}, capped).ok());
  EXPECT_THAT(check("finished", {{"max_steps", "100", "50"}}, capped).message(),
              HasSubstr("a --max_steps above 100 (or 0)"));
  // A stopped run may go on under any changed plan, shorter too.
  EXPECT_TRUE(check("stopped", {{"epochs", "5", "2"}}, before).ok());
  EXPECT_THAT(check("stopped", {}, before).message(),
              HasSubstr("changes nothing"));
  EXPECT_THAT(check("stopped", {}, before).message(),
              HasSubstr("--resume=runs/r"));
}

}  // namespace
}  // namespace ps
