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

// The status of a call this client completed (it never cancels a call it
// completes): CANCELLED there means the shard dropped the call, e.g. one
// whose stream stalled past the shard's --stream_idle_timeout because the
// link dropped in the middle of it, and kept nothing of it (a push is
// applied whole or not at all). Returned as UNAVAILABLE, so that
// RetryWhileUnavailable makes the call again; any other status as it is.
absl::Status DroppedByShardIsUnavailable(absl::Status status);

// Runs `attempt` until it succeeds, fails with an error other than
// UNAVAILABLE, or has failed UNAVAILABLE for `policy.timeout` (counted from
// the first such failure: a pull may wait long for other ranks before its
// shard goes down), and returns its last status; once given up,
// UNAVAILABLE "`what` still failing after ...". `who` names the shard in the
// warning logged before each new attempt. Pushes are safe to repeat: the
// shards recognise a batch they have already applied.
absl::Status RetryWhileUnavailable(
    const RetryPolicy& policy, absl::string_view who, absl::string_view what,
    const std::function<absl::Status()>& attempt);

}  // namespace ps::client_internal

#endif  // PS_CLIENT_RETRY_H_
