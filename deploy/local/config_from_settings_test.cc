#include "deploy/local/config_from_settings.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::TestTmpDir;
using ::testing::HasSubstr;
using Type = RunSettings::Type;

// The launcher's flags with launch_main's defaults, but binaries and a data
// directory that exist.
RunSettings Settings() {
  RunSettings s;
  for (const auto& [name, type, value] :
       std::vector<std::tuple<const char*, Type, std::string>>{
           {"num_servers", Type::kInt, "2"},
           {"num_workers", Type::kInt, "2"},
           {"model", Type::kString, "784-256-128-10"},
           {"epochs", Type::kInt, "10"},
           {"batch_size", Type::kInt, "64"},
           {"mode", Type::kString, "sync"},
           {"staleness", Type::kInt, "0"},
           {"optimizer", Type::kString, ""},
           {"lr_schedule", Type::kString, "constant"},
           {"checkpoints", Type::kBool, "true"},
           {"checkpoint_dir", Type::kString, ""},
           {"max_restarts", Type::kInt, "3"},
           {"restart_backoff", Type::kDuration, "1s"},
           {"output", Type::kString, "auto"},
           {"progress_interval", Type::kDuration, "10s"},
           {"log_every", Type::kInt, "100"},
           {"eval_every", Type::kInt, "0"},
           {"max_steps", Type::kInt64, "0"},
           {"retry_timeout", Type::kDuration, "2m"},
           {"metrics_port_base", Type::kInt, "0"},
           {"learning_rate", Type::kDouble, "0"},
           {"seed", Type::kInt64, "1"},
           {"job_id", Type::kString, ""},
           {"auth", Type::kString, "none"},
           {"data_dir", Type::kString, TestTmpDir()},
           {"device", Type::kString, "auto"},
           {"save_model", Type::kString, ""},
           {"server_flags", Type::kString, ""},
           {"worker_flags", Type::kString, ""},
           {"server_binary", Type::kString, "/bin/true"},
           {"worker_binary", Type::kString, ""},
           {"base_port", Type::kInt, "0"},
           {"startup_timeout", Type::kDuration, "1m"},
           {"shutdown_timeout", Type::kDuration, "30s"},
           {"kill_grace", Type::kDuration, "5s"},
       }) {
    s.Define(name, type, value);
  }
  // Set, as on the command line: a program's run may not set it.
  s.Set("worker_binary", "/bin/true").IgnoreError();
  return s;
}

absl::StatusOr<LaunchConfig> Config(const RunSettings& settings,
                                    std::vector<std::string> program = {}) {
  return ConfigFromSettings(settings, LauncherLocation{}, "/cwd",
                            std::move(program), "/cwd/runs/r");
}

TEST(ConfigFromSettingsTest, TakesEverySettingsValue) {
  RunSettings settings = Settings();
  ASSERT_TRUE(settings.Set("epochs", "3").ok());
  ASSERT_TRUE(settings.Set("mode", "ssp").ok());
  ASSERT_TRUE(settings.Set("staleness", "2").ok());
  ASSERT_TRUE(settings.Set("retry_timeout", "7s").ok());
  ASSERT_TRUE(settings.Set("save_model", "m.model").ok());
  absl::StatusOr<LaunchConfig> config = Config(settings);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->epochs, 3);
  EXPECT_EQ(config->mode, "ssp");
  EXPECT_EQ(config->staleness, 2);
  EXPECT_EQ(config->retry_timeout, absl::Seconds(7));
  EXPECT_EQ(config->checkpoint_dir, "/cwd/runs/r/checkpoints");
  EXPECT_EQ(config->run_dir, "/cwd/runs/r");
  EXPECT_EQ(config->server_binary, "/bin/true");
  EXPECT_EQ(config->worker_binary, "/bin/true");
  EXPECT_TRUE(absl::StartsWith(config->job_id, "launch-")) << config->job_id;
}

TEST(ConfigFromSettingsTest, KeepsAGivenJobIdAndCheckpointDirectory) {
  RunSettings settings = Settings();
  ASSERT_TRUE(settings.Set("job_id", "job-7").ok());
  ASSERT_TRUE(settings.Set("checkpoint_dir", "/ckpt").ok());
  absl::StatusOr<LaunchConfig> config = Config(settings);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->job_id, "job-7");
  EXPECT_EQ(config->checkpoint_dir, "/ckpt");
  ASSERT_TRUE(settings.Set("checkpoints", "false").ok());
  EXPECT_THAT(Config(settings).status().message(),
              HasSubstr("--checkpoint_dir with --nocheckpoints: choose one"));
  ASSERT_TRUE(settings.Set("checkpoint_dir", "").ok());
  config = Config(settings);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->checkpoint_dir, "");
}

TEST(ConfigFromSettingsTest, RefusesBadValuesNamingTheFlag) {
  RunSettings settings = Settings();
  ASSERT_TRUE(settings.Set("output", "loud").ok());
  EXPECT_THAT(Config(settings).status().message(),
              HasSubstr("--output must be one of auto|progress|stream"));
  settings = Settings();
  ASSERT_TRUE(settings.Set("mode", "ssp").ok());
  EXPECT_THAT(Config(settings).status().message(),
              HasSubstr("--mode=ssp needs --staleness=N"));
  settings = Settings();
  ASSERT_TRUE(settings.Set("mode", "allreduce").ok());
  // No /allreduce/coordinator beside --server_binary=/bin/true.
  EXPECT_THAT(Config(settings).status().message(),
              HasSubstr("build it with `bazel build //allreduce:coordinator`"));
  settings = Settings();
  ASSERT_TRUE(settings.Set("data_dir", "/no/such/dir").ok());
  EXPECT_THAT(Config(settings).status().message(),
              HasSubstr("--data_dir=/no/such/dir is not a directory"));
}

TEST(ConfigFromSettingsTest, AProgramTakesNoFlagOfOurWorker) {
  RunSettings settings = Settings();
  ASSERT_TRUE(settings.Set("worker_binary", "").ok());
  absl::StatusOr<LaunchConfig> config = Config(settings, {"/bin/true"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->program, std::vector<std::string>({"/bin/true"}));
  EXPECT_EQ(config->worker_binary, "");
  ASSERT_TRUE(settings.Set("epochs", "3").ok());
  EXPECT_THAT(Config(settings, {"/bin/true"}).status().message(),
              HasSubstr("--epochs configures our worker binary"));
}

}  // namespace
}  // namespace ps
