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

#endif  // PS_COMMON_STATUS_TESTING_H_
