#include "deploy/local/curves.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::FreshTestDir;
using ::testing::HasSubstr;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// gnuplot comes from scripts/install_deps.sh (gnuplot-nox); without it the
// CSV is still written and the reason for the missing picture given.
void ExpectPictureOrReason(const CurveFiles& files) {
  if (std::filesystem::exists("/usr/bin/gnuplot")) {
    ASSERT_FALSE(files.png.empty()) << files.png_problem;
    EXPECT_EQ(Read(files.png).substr(1, 3), "PNG");
  } else {
    EXPECT_THAT(files.png_problem, HasSubstr("gnuplot-nox"));
  }
}

TEST(CurvesTest, WritesTheCsvAndPlotsIt) {
  const std::string dir = FreshTestDir("curves \"quoted\"");
  std::vector<EpochRecord> history = {{1, 0.5, 0.8}, {2, 0.4, 0.85}};
  absl::StatusOr<CurveFiles> files = WriteCurves(dir, history, "a \"run\"");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(Read(files->csv), HistoryCsv(history));
  ExpectPictureOrReason(*files);
}

TEST(CurvesTest, PlotsALossWithoutAnyAccuracy) {
  const std::string dir = FreshTestDir("curves_no_accuracy");
  absl::StatusOr<CurveFiles> files =
      WriteCurves(dir, {{1, 0.5, std::nullopt}}, "stopped in epoch 1");
  ASSERT_TRUE(files.ok()) << files.status();
  ExpectPictureOrReason(*files);
}

TEST(CurvesTest, NothingToDrawIsAnError) {
  EXPECT_FALSE(WriteCurves(FreshTestDir("curves_empty"), {}, "x").ok());
}

}  // namespace
}  // namespace ps
