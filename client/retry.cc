#include "client/retry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace ps::client_internal {

RetryPolicy RetryPolicy::FromOptions(const ClientOptions& options) {
  return {options.retry_timeout, options.initial_backoff, options.max_backoff};
}

absl::Status DroppedByShardIsUnavailable(absl::Status status) {
  if (!absl::IsCancelled(status)) return status;
  return absl::UnavailableError(
      absl::StrCat("the shard dropped the call: ", status.message()));
}

absl::Status RetryWhileUnavailable(
    const RetryPolicy& policy, absl::string_view who, absl::string_view what,
    const std::function<absl::Status()>& attempt) {
  absl::Time deadline = absl::InfiniteFuture();
  absl::Duration backoff = policy.initial_backoff;
  while (true) {
    absl::Status status = attempt();
    if (status.code() != absl::StatusCode::kUnavailable) return status;
    if (deadline == absl::InfiniteFuture()) {
      deadline = absl::Now() + policy.timeout;
    }
    if (absl::Now() + backoff > deadline) {
      return absl::UnavailableError(absl::StrCat(
          what, " still failing after ", absl::FormatDuration(policy.timeout),
          ": ", status.message()));
    }
    spdlog::warn("{} unavailable for {}, retrying in {}: {}", who, what,
                 absl::FormatDuration(backoff), status.message());
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, policy.max_backoff);
  }
}

}  // namespace ps::client_internal
