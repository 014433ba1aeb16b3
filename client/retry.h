#ifndef PS_CLIENT_RETRY_H_
#define PS_CLIENT_RETRY_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/parameter_client.h"

namespace ps::client_internal {

// How a call to a shard that is unreachable (down, restarting) or not ready
// is repeated: with exponential backoff from `initial_backoff` to
// `max_backoff`, for up to `timeout`.
struct RetryPolicy {
  absl::Duration timeout;
  absl::Duration initial_backoff;
  absl::Duration max_backoff;

  // ClientOptions' retry_timeout, initial_backoff and max_backoff.
  static RetryPolicy FromOptions(const ClientOptions& options);
};

// Whether a call that failed with `status` is tried again: UNAVAILABLE (the
// shard is down, restarting or unreachable) and CANCELLED, which this client
// never asks for (it gives up a call only once done with it): the shard
// dropped the call, e.g. one whose stream stalled past its
// --stream_idle_timeout because the link dropped in the middle of it. The
// shard keeps nothing of a call it dropped (a push is applied whole or not
// at all).
bool IsRetried(const absl::Status& status);

// Runs `attempt` until it succeeds, fails with an error that is not
// IsRetried, or has failed so for `policy.timeout` (counted from the first
// such failure: a pull may wait long for other ranks before its shard goes
// down), and returns its last status; once given up, UNAVAILABLE "`what`
// still failing after ...". `who` names the shard in the warning logged
// before each new attempt. Pushes are safe to repeat: the shards recognise
// a batch they have already applied.
absl::Status RetryWhileUnavailable(
    const RetryPolicy& policy, absl::string_view who, absl::string_view what,
    const std::function<absl::Status()>& attempt);

}  // namespace ps::client_internal

#endif  // PS_CLIENT_RETRY_H_
