#ifndef PS_COMMON_CONSISTENCY_MODE_H_
#define PS_COMMON_CONSISTENCY_MODE_H_

#include <cstdint>

#include "absl/status/status.h"
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

// The largest --staleness: large enough for any job, small enough to catch
// typos.
inline constexpr int64_t kMaxStaleness = 1000000;

// The rule for a job's --staleness: with ssp, the steps a worker may lead the
// slowest, in [1, kMaxStaleness] (0 would be sync); with sync and async, 0.
// InvalidArgument naming the flag otherwise. The launcher checks it before
// it starts anything.
absl::Status CheckStaleness(ConsistencyMode mode, int64_t staleness);

// The step a worker's next push is for, after it was at step `clock` and
// pulled weights of `version` (the steps the servers applied). In sync mode
// a worker joins the step the servers are at, which is ahead of its own
// after a restart or a step the others completed without it; in ssp and
// async each worker keeps its own clock, which the servers bound (ssp) or
// ignore (async).
uint64_t NextPushClock(ConsistencyMode mode, uint64_t clock, uint64_t version);

}  // namespace ps

#endif  // PS_COMMON_CONSISTENCY_MODE_H_
