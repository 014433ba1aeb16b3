#ifndef PS_COMMON_BYTE_SIZE_H_
#define PS_COMMON_BYTE_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// Parses a count of bytes as flags write it: decimal digits with an optional
// K, M or G suffix in either case (powers of 1024): "0", "64", "4K", "16m",
// "1G". InvalidArgument, naming `text`, for anything else (signs, spaces,
// other suffixes) or a count above `max`. The caller names its flag.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text, uint64_t max);

}  // namespace ps

#endif  // PS_COMMON_BYTE_SIZE_H_
