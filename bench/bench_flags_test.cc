#include "bench/bench_flags.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace ps::bench {
namespace {

TEST(ParseSizesTest, ParsesSizeLists) {
  absl::StatusOr<std::vector<uint64_t>> sizes = ParseSizes("4K,1M, 16m,8");
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_EQ(*sizes, (std::vector<uint64_t>{4096, 1 << 20, 16 << 20, 8}));
  for (const char* bad :
       {"", "4K,", "0", "3", "6", "abc", "4X", "2G", "-4K", "1.5M"}) {
    EXPECT_FALSE(ParseSizes(bad).ok()) << bad;
  }
}

TEST(ParseNumberListTest, ParsesWholeNumbersInRange) {
  absl::StatusOr<std::vector<int64_t>> numbers =
      ParseNumberList("2, 4 ,16", "worker count", 1, 16);
  ASSERT_TRUE(numbers.ok()) << numbers.status();
  EXPECT_EQ(*numbers, (std::vector<int64_t>{2, 4, 16}));
  numbers = ParseNumberList("0,10000", "rate", 0);
  ASSERT_TRUE(numbers.ok()) << numbers.status();
  EXPECT_EQ(*numbers, (std::vector<int64_t>{0, 10000}));
}

TEST(ParseNumberListTest, RejectsWhatIsNotAWholeNumberInRange) {
  for (const char* bad : {"", "0", "17", "1,,2", "2,", "two", "1.5", "-1"}) {
    EXPECT_FALSE(ParseNumberList(bad, "worker count", 1, 16).ok()) << bad;
  }
  EXPECT_FALSE(ParseNumberList("-1", "rate", 0).ok());
}

TEST(ParseNumberListTest, SaysWhichEntryAndTheRange) {
  absl::StatusOr<std::vector<int64_t>> numbers =
      ParseNumberList("2,x", "worker count", 1, 16);
  EXPECT_EQ(numbers.status(),
            absl::InvalidArgumentError(
                "worker count \"x\" is not a whole number in [1, 16]"));
  numbers = ParseNumberList("-5", "rate", 0);
  EXPECT_EQ(numbers.status(),
            absl::InvalidArgumentError(
                "rate \"-5\" is not a whole number of at least 0"));
}

TEST(ParseHostGridTest, ParsesWorkerCountsAndRatesNamingTheFlagThatIsOff) {
  absl::StatusOr<HostGrid> grid = ParseHostGrid("2,4", "0,1000");
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ(grid->workers, (std::vector<int>{2, 4}));
  EXPECT_EQ(grid->rates_mbit, (std::vector<int64_t>{0, 1000}));
  EXPECT_EQ(ParseHostGrid("2,0", "1000").status(),
            absl::InvalidArgumentError("--workers: worker count \"0\" is not "
                                       "a whole number in [1, 200]"));
  EXPECT_FALSE(ParseHostGrid("201", "1000").ok());
  EXPECT_EQ(
      ParseHostGrid("2", "1G").status(),
      absl::InvalidArgumentError(
          "--rates_mbit: rate \"1G\" is not a whole number of at least 0"));
}

TEST(ParseChoiceListTest, ParsesNamesOfTheAllowedOnesOnceEach) {
  const std::vector<std::string> allowed = {"grpc", "frames"};
  absl::StatusOr<std::vector<std::string>> names =
      ParseChoiceList("transports", "frames, grpc", allowed);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"frames", "grpc"}));
  EXPECT_EQ(ParseChoiceList("transports", "grpc,tcp", allowed).status(),
            absl::InvalidArgumentError(
                "--transports: \"tcp\" is not one of grpc, frames"));
  EXPECT_EQ(
      ParseChoiceList("transports", "grpc,grpc", allowed).status(),
      absl::InvalidArgumentError("--transports: \"grpc\" is listed twice"));
  for (const char* bad : {"", "grpc,", ",frames", "GRPC"}) {
    EXPECT_FALSE(ParseChoiceList("transports", bad, allowed).ok()) << bad;
  }
}

TEST(LinkRateNameTest, NamesRatesInGbitAndZeroUnshaped) {
  EXPECT_EQ(LinkRateName(0), "unshaped");
  EXPECT_EQ(LinkRateName(1000), "1 Gbit/s");
  EXPECT_EQ(LinkRateName(10000), "10 Gbit/s");
  EXPECT_EQ(LinkRateName(100), "0.1 Gbit/s");
}

}  // namespace
}  // namespace ps::bench
