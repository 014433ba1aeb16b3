#include "client/retry.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::client_internal {
namespace {

using ::testing::HasSubstr;

// Retries for an hour, but a millisecond apart.
RetryPolicy Patient() {
  return {absl::Hours(1), absl::Milliseconds(1), absl::Milliseconds(2)};
}

TEST(RetryTest, RepeatsWhileUnavailableThenReturnsTheAnswer) {
  int attempts = 0;
  const absl::Status status =
      RetryWhileUnavailable(Patient(), "server 0 (a:1)", "pull", [&] {
        ++attempts;
        return attempts < 4 ? absl::UnavailableError("restarting")
                            : absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(attempts, 4);
}

TEST(RetryTest, ReturnsAnyOtherErrorAtOnce) {
  int attempts = 0;
  const absl::Status status =
      RetryWhileUnavailable(Patient(), "server 0 (a:1)", "pull", [&] {
        ++attempts;
        return attempts == 1 ? absl::UnavailableError("restarting")
                             : absl::FailedPreconditionError("not declared");
      });
  EXPECT_EQ(status, absl::FailedPreconditionError("not declared"));
  EXPECT_EQ(attempts, 2);
}

TEST(RetryTest, ACallTheShardDroppedIsMadeAgain) {
  EXPECT_EQ(DroppedByShardIsUnavailable(absl::CancelledError("Cancelled on the "
                                                             "server side")),
            absl::UnavailableError(
                "the shard dropped the call: Cancelled on the server side"));
  EXPECT_EQ(DroppedByShardIsUnavailable(absl::AbortedError("stale")),
            absl::AbortedError("stale"));
  EXPECT_TRUE(DroppedByShardIsUnavailable(absl::OkStatus()).ok());
  int attempts = 0;
  const absl::Status status =
      RetryWhileUnavailable(Patient(), "server 0 (a:1)", "push", [&] {
        ++attempts;
        return DroppedByShardIsUnavailable(
            attempts == 1 ? absl::CancelledError("Cancelled on the server side")
                          : absl::OkStatus());
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(attempts, 2);
}

TEST(RetryTest, GivesUpOnceTheTimeoutHasPassedSayingWhatFailed) {
  RetryPolicy policy = Patient();
  policy.timeout = absl::ZeroDuration();
  int attempts = 0;
  const absl::Status status =
      RetryWhileUnavailable(policy, "server 1 (b:2)", "push", [&] {
        ++attempts;
        return absl::UnavailableError("connection refused");
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("push still failing after 0: connection refused"));
  EXPECT_EQ(attempts, 1);
}

TEST(RetryTest, TakesTheOptionsRetryFields) {
  ClientOptions options;
  options.retry_timeout = absl::Seconds(7);
  options.initial_backoff = absl::Milliseconds(3);
  options.max_backoff = absl::Seconds(4);
  const RetryPolicy policy = RetryPolicy::FromOptions(options);
  EXPECT_EQ(policy.timeout, absl::Seconds(7));
  EXPECT_EQ(policy.initial_backoff, absl::Milliseconds(3));
  EXPECT_EQ(policy.max_backoff, absl::Seconds(4));
}

}  // namespace
}  // namespace ps::client_internal
