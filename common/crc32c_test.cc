#include "common/crc32c.h"

#include <cstdint>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace ps::crc32c {
namespace {

// Bit at a time, straight from the definition (reflected 0x1EDC6F41).
uint32_t Reference(absl::string_view data) {
  uint32_t crc = ~0u;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k)
      crc = (crc >> 1) ^ (0x82f63b78 & (0u - (crc & 1)));
  }
  return ~crc;
}

TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(Value("123456789"), 0xE3069283u);  // The standard check value.
  EXPECT_EQ(Value(""), 0u);
  EXPECT_EQ(Value(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4.
  EXPECT_EQ(Value(std::string(32, '\xff')), 0x62A8AB43u);
}

TEST(Crc32cTest, EveryPathAgreesWithTheDefinitionAtEveryLengthAndSplit) {
  std::mt19937 random(7);
  std::string data(1000, '\0');
  for (char& c : data) c = static_cast<char>(random());
  for (size_t n = 0; n <= data.size(); n += (n < 40 ? 1 : 37)) {
    const absl::string_view d = absl::string_view(data).substr(0, n);
    const uint32_t expected = Reference(d);
    EXPECT_EQ(Value(d), expected) << n;
    EXPECT_EQ(ExtendPortable(0, d), expected) << n;
    const size_t half = n / 3;
    EXPECT_EQ(Extend(Extend(0, d.substr(0, half)), d.substr(half)), expected)
        << n;
  }
}

}  // namespace
}  // namespace ps::crc32c
