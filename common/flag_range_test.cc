#include "common/flag_range.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(CheckFlagRangeTest, AcceptsBothBoundsAndBetween) {
  EXPECT_TRUE(CheckFlagRange("port", 0, 0, 65535).ok());
  EXPECT_TRUE(CheckFlagRange("port", 80, 0, 65535).ok());
  EXPECT_TRUE(CheckFlagRange("port", 65535, 0, 65535).ok());
  EXPECT_TRUE(CheckFlagRange("seed", INT64_MAX, 0, INT64_MAX).ok());
}

TEST(CheckFlagRangeTest, NamesFlagRangeAndValueOutside) {
  const absl::Status below = CheckFlagRange("tcp_data_port", -2, -1, 65535);
  EXPECT_EQ(below.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(below.message(), "--tcp_data_port must be in [-1, 65535], got -2");
  const absl::Status above = CheckFlagRange("epochs", 100001, 1, 100000);
  EXPECT_EQ(above.message(), "--epochs must be in [1, 100000], got 100001");
  EXPECT_FALSE(CheckFlagRange("seed", INT64_MIN, 0, INT64_MAX).ok());
}

}  // namespace
}  // namespace ps
