#include "common/consistency_mode.h"

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

}  // namespace ps
