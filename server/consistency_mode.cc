#include "server/consistency_mode.h"

#include "absl/strings/str_cat.h"

namespace ps::server {

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

absl::StatusOr<FailurePolicy> ParseFailurePolicy(absl::string_view name) {
  if (name == "fail") return FailurePolicy::kFail;
  if (name == "elastic") return FailurePolicy::kElastic;
  return absl::InvalidArgumentError(absl::StrCat(
      "--on_worker_failure must be \"fail\" or \"elastic\", got \"", name,
      "\""));
}

absl::string_view FailurePolicyName(FailurePolicy policy) {
  return policy == FailurePolicy::kFail ? "fail" : "elastic";
}

}  // namespace ps::server
