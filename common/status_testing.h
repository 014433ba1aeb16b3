#ifndef PS_COMMON_STATUS_TESTING_H_
#define PS_COMMON_STATUS_TESTING_H_

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::testing {

// Expects InvalidArgument whose message contains `fragment`: what every
// parser of outside input must return for bad input.
inline void ExpectInvalid(const absl::Status& status,
                          const std::string& fragment) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr(fragment));
}

}  // namespace ps::testing

// Expects (asserts) that `expr`, an absl::Status, is OK; prints it if not.
// `expr` is evaluated once.
#define EXPECT_OK(expr)                                                     \
  do {                                                                      \
    const ::absl::Status ps_status_testing_status = (expr);                 \
    EXPECT_TRUE(ps_status_testing_status.ok()) << ps_status_testing_status; \
  } while (false)
#define ASSERT_OK(expr)                                                     \
  do {                                                                      \
    const ::absl::Status ps_status_testing_status = (expr);                 \
    ASSERT_TRUE(ps_status_testing_status.ok()) << ps_status_testing_status; \
  } while (false)

#endif  // PS_COMMON_STATUS_TESTING_H_
