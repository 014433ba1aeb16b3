#include "common/crc32c.h"

#include <array>

namespace ps::crc32c {
namespace {

// Reflected Castagnoli polynomial.
constexpr uint32_t kPolynomial = 0x82f63b78;

// Slicing-by-4 tables, built at compile time.
struct Tables {
  std::array<std::array<uint32_t, 256>, 4> t{};
  constexpr Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int k = 0; k < 8; ++k)
        crc = (crc >> 1) ^ (kPolynomial & (0u - (crc & 1)));
      t[0][i] = crc;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int j = 1; j < 4; ++j)
        t[j][i] = (t[j - 1][i] >> 8) ^ t[0][t[j - 1][i] & 0xff];
    }
  }
};

constexpr Tables kTables;

}  // namespace

uint32_t Extend(uint32_t init_crc, absl::string_view data) {
  const auto& t = kTables.t;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  uint32_t crc = ~init_crc;
  while (n >= 4) {
    crc ^= static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
           static_cast<uint32_t>(p[2]) << 16 |
           static_cast<uint32_t>(p[3]) << 24;
    crc = t[3][crc & 0xff] ^ t[2][(crc >> 8) & 0xff] ^
          t[1][(crc >> 16) & 0xff] ^ t[0][crc >> 24];
    p += 4;
    n -= 4;
  }
  while (n-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

}  // namespace ps::crc32c
