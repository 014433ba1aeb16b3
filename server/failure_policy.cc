#include "server/failure_policy.h"

#include "absl/strings/str_cat.h"

namespace ps::server {

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
