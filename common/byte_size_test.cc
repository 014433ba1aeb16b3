#include "common/byte_size.h"

#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kNoLimit = uint64_t{1} << 62;

TEST(ByteSizeTest, ReadsDigitsWithABinarySuffixInEitherCase) {
  EXPECT_EQ(*ParseByteSize("0", kNoLimit), 0u);
  EXPECT_EQ(*ParseByteSize("64", kNoLimit), 64u);
  EXPECT_EQ(*ParseByteSize("4K", kNoLimit), 4096u);
  EXPECT_EQ(*ParseByteSize("16m", kNoLimit), 16u << 20);
  EXPECT_EQ(*ParseByteSize("3G", kNoLimit), uint64_t{3} << 30);
}

TEST(ByteSizeTest, RefusesWhatIsNotACountNamingIt) {
  for (const char* bad :
       {"", "K", "-1", "+4", " 4", "4 ", "4T", "4KB", "1.5M", "0x10", "M4"}) {
    const absl::StatusOr<uint64_t> parsed = ParseByteSize(bad, kNoLimit);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr(bad));
  }
}

TEST(ByteSizeTest, RefusesACountAboveTheLimitWithoutOverflowing) {
  EXPECT_EQ(*ParseByteSize("1G", uint64_t{1} << 30), uint64_t{1} << 30);
  EXPECT_FALSE(ParseByteSize("1025M", uint64_t{1} << 30).ok());
  EXPECT_FALSE(ParseByteSize("18446744073709551615G", kNoLimit).ok());
  EXPECT_THAT(ParseByteSize("2K", 1000).status().message(),
              HasSubstr("more than 1000 bytes"));
}

}  // namespace
}  // namespace ps
