#include "deploy/local/run_settings.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, settings_test_count, 3, "");
ABSL_FLAG(absl::Duration, settings_test_wait, absl::Seconds(2), "");
ABSL_FLAG(std::string, settings_test_name, "a", "");

namespace ps {
namespace {

using ::testing::HasSubstr;

TEST(RunSettingsTest, TakesTheRegistrysValuesAndLeavesItAlone) {
  absl::SetFlag(&FLAGS_settings_test_count, 7);
  RunSettings settings =
      RunSettings::FromFlags({"settings_test_count", "settings_test_wait",
                              "settings_test_name", "no_such_flag"});
  EXPECT_EQ(settings.Get<int>("settings_test_count"), 7);
  EXPECT_EQ(settings.Get<absl::Duration>("settings_test_wait"),
            absl::Seconds(2));
  EXPECT_EQ(settings.Text("settings_test_name"), "a");
  EXPECT_FALSE(settings.Has("no_such_flag"));
  EXPECT_TRUE(settings.Changed("settings_test_count"));
  EXPECT_FALSE(settings.Changed("settings_test_wait"));

  ASSERT_TRUE(settings.Set("settings_test_count", "9").ok());
  ASSERT_TRUE(settings.Set("settings_test_wait", "1m").ok());
  EXPECT_EQ(settings.Get<int>("settings_test_count"), 9);
  EXPECT_EQ(settings.Get<absl::Duration>("settings_test_wait"),
            absl::Minutes(1));
  EXPECT_TRUE(settings.Changed("settings_test_wait"));
  // The registry keeps what the command line said.
  EXPECT_EQ(absl::GetFlag(FLAGS_settings_test_count), 7);
  EXPECT_EQ(absl::GetFlag(FLAGS_settings_test_wait), absl::Seconds(2));
}

TEST(RunSettingsTest, RefusesValuesOfTheWrongTypeAndUnknownFlags) {
  RunSettings settings;
  settings.Define("count", RunSettings::Type::kInt, "3");
  settings.Define("on", RunSettings::Type::kBool, "true");
  const absl::Status bad = settings.Set("count", "three");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(),
              HasSubstr("Illegal value 'three' specified for flag 'count'"));
  EXPECT_EQ(settings.Get<int>("count"), 3);
  EXPECT_FALSE(settings.Set("on", "maybe").ok());
  EXPECT_TRUE(settings.Set("on", "false").ok());
  EXPECT_FALSE(settings.Get<bool>("on"));
  EXPECT_THAT(settings.Set("other", "1").message(), HasSubstr("--other"));
}

}  // namespace
}  // namespace ps
