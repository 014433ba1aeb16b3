#include "update/lr_schedule.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace ps::update {
namespace {

TEST(LearningRateScheduleTest, ConstantIgnoresTheHorizon) {
  auto s = *LearningRateSchedule::Create(LrScheduleKind::kConstant, 0.1f, 0);
  for (uint64_t u : {0, 5, 1000000}) EXPECT_EQ(s.At(u, 100), 0.1f);
}

TEST(LearningRateScheduleTest, CosineDecaysFromBaseToMinOverTheHorizon) {
  auto s = *LearningRateSchedule::Create(LrScheduleKind::kCosine, 0.1f, 0.01f);
  EXPECT_FLOAT_EQ(s.At(0, 100), 0.1f);
  EXPECT_FLOAT_EQ(s.At(50, 100), 0.055f);  // Half way: the mean.
  // A quarter: min + (base - min) * (1 + cos(pi / 4)) / 2.
  EXPECT_FLOAT_EQ(s.At(25, 100),
                  0.01f + 0.09f * (1.0f + std::sqrt(0.5f)) / 2.0f);
  EXPECT_FLOAT_EQ(s.At(75, 100),
                  0.01f + 0.09f * (1.0f - std::sqrt(0.5f)) / 2.0f);
  // Decreasing all the way.
  for (uint64_t u = 1; u <= 100; ++u) EXPECT_LT(s.At(u, 100), s.At(u - 1, 100));
}

TEST(LearningRateScheduleTest, CosineClampsAfterTheHorizon) {
  auto s = *LearningRateSchedule::Create(LrScheduleKind::kCosine, 0.1f, 0.0f);
  EXPECT_EQ(s.At(100, 100), 0.0f);
  EXPECT_EQ(s.At(1000000, 100), 0.0f);
}

TEST(LearningRateScheduleTest, CosineWithUnknownHorizonKeepsTheBaseRate) {
  auto s = *LearningRateSchedule::Create(LrScheduleKind::kCosine, 0.1f, 0.0f);
  EXPECT_EQ(s.At(7, 0), 0.1f);
}

TEST(LearningRateScheduleTest, RejectsBadRatesNamingTheFlag) {
  auto min_above =
      LearningRateSchedule::Create(LrScheduleKind::kCosine, 0.1f, 0.2f);
  EXPECT_NE(min_above.status().message().find("--min_learning_rate"),
            std::string::npos);
  EXPECT_FALSE(
      LearningRateSchedule::Create(LrScheduleKind::kCosine, 0.1f, -1).ok());
  EXPECT_FALSE(
      LearningRateSchedule::Create(LrScheduleKind::kCosine, 0.1f, NAN).ok());
  EXPECT_NE(LearningRateSchedule::Create(LrScheduleKind::kConstant, 0, 0)
                .status()
                .message()
                .find("--learning_rate"),
            std::string::npos);
  EXPECT_EQ(*ParseLrSchedule("cosine"), LrScheduleKind::kCosine);
  EXPECT_NE(ParseLrSchedule("linear").status().message().find("--lr_schedule"),
            std::string::npos);
}

}  // namespace
}  // namespace ps::update
