#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

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

#if defined(__x86_64__)
// The SSE4.2 crc32 instruction computes the same CRC-32C several times
// faster than the tables (bench/README.md, the update log's cost).
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(
    uint32_t crc, const unsigned char* p, size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

bool HasHardware() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t ExtendPortable(uint32_t init_crc, absl::string_view data) {
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

uint32_t Extend(uint32_t init_crc, absl::string_view data) {
#if defined(__x86_64__)
  if (HasHardware()) {
    return ~ExtendHardware(~init_crc,
                           reinterpret_cast<const unsigned char*>(data.data()),
                           data.size());
  }
#endif
  return ExtendPortable(init_crc, data);
}

}  // namespace ps::crc32c
