#include "common/consistency_mode.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ps {

absl::StatusOr<ConsistencyMode> ParseConsistencyMode(absl::string_view name) {
  if (name == "sync") return ConsistencyMode::kSync;
  if (name == "ssp") return ConsistencyMode::kSsp;
  if (name == "async") return ConsistencyMode::kAsync;
  return absl::InvalidArgumentError(absl::StrCat(
      "--mode must be \"sync\", \"ssp\" or \"async\", got \"", name, "\""));
}

absl::string_view ConsistencyModeName(ConsistencyMode mode) {
  switch (mode) {
    case ConsistencyMode::kSync:
      return "sync";
    case ConsistencyMode::kSsp:
      return "ssp";
    case ConsistencyMode::kAsync:
      return "async";
  }
  return "unknown";
}

absl::Status CheckStaleness(ConsistencyMode mode, int64_t staleness) {
  if (staleness < 0 || staleness > kMaxStaleness) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--staleness must be in [0, ", kMaxStaleness, "], got ", staleness));
  }
  if (staleness != 0 && mode != ConsistencyMode::kSsp) {
    return absl::InvalidArgumentError(
        absl::StrCat("--staleness applies only to --mode=ssp, not --mode=",
                     ConsistencyModeName(mode)));
  }
  if (mode == ConsistencyMode::kSsp && staleness == 0) {
    return absl::InvalidArgumentError(
        "--mode=ssp needs --staleness=N (N >= 1 steps a worker may lead the "
        "slowest; 0 would be --mode=sync)");
  }
  return absl::OkStatus();
}

uint64_t NextPushClock(ConsistencyMode mode, uint64_t clock, uint64_t version) {
  if (mode == ConsistencyMode::kSync) return std::max(clock, version);
  return clock;
}

}  // namespace ps
