#ifndef PS_COMMON_CONSISTENCY_MODE_H_
#define PS_COMMON_CONSISTENCY_MODE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// How the servers order workers' updates: kSync is bulk-synchronous (every
// step sums every live worker's gradient, in rank order), kSsp lets a
// worker lead the slowest by a bounded number of steps, kAsync applies
// every push as it comes.
enum class ConsistencyMode { kSync, kSsp, kAsync };

// Parses "sync", "ssp" or "async".
absl::StatusOr<ConsistencyMode> ParseConsistencyMode(absl::string_view name);
absl::string_view ConsistencyModeName(ConsistencyMode mode);

}  // namespace ps

#endif  // PS_COMMON_CONSISTENCY_MODE_H_
