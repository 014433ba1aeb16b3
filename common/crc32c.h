#ifndef PS_COMMON_CRC32C_H_
#define PS_COMMON_CRC32C_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace ps::crc32c {

// CRC-32C (Castagnoli), as in iSCSI and LevelDB. Debian's Abseil predates
// absl/crc, so the project carries its own table-driven version.

// Returns the CRC of `data` appended to data whose CRC was `init_crc`.
uint32_t Extend(uint32_t init_crc, absl::string_view data);

inline uint32_t Value(absl::string_view data) { return Extend(0, data); }

// Extend without the CPU's crc32 instruction (Extend uses it where there is
// one): the reference the tests compare against.
uint32_t ExtendPortable(uint32_t init_crc, absl::string_view data);

}  // namespace ps::crc32c

#endif  // PS_COMMON_CRC32C_H_
