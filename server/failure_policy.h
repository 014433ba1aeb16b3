#ifndef PS_SERVER_FAILURE_POLICY_H_
#define PS_SERVER_FAILURE_POLICY_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps::server {

// What happens when a worker dies: kFail stops the job, kElastic carries on
// with the live workers.
enum class FailurePolicy { kFail, kElastic };

// Parses "fail" or "elastic".
absl::StatusOr<FailurePolicy> ParseFailurePolicy(absl::string_view name);
absl::string_view FailurePolicyName(FailurePolicy policy);

}  // namespace ps::server

#endif  // PS_SERVER_FAILURE_POLICY_H_
