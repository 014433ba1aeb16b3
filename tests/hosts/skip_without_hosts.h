#ifndef PS_TESTS_HOSTS_SKIP_WITHOUT_HOSTS_H_
#define PS_TESTS_HOSTS_SKIP_WITHOUT_HOSTS_H_

#include <string>

#include "gtest/gtest.h"
#include "tests/hosts/test_hosts.h"

// For a test body or a fixture's SetUp() that needs test hosts: skips the
// test, saying why, where they cannot be made on this machine
// (TestHosts::WhyUnavailable()). A macro because GTEST_SKIP() returns from
// the function it stands in.
#define SKIP_WITHOUT_TEST_HOSTS()                                         \
  if (const std::string why = ::ps::testing::TestHosts::WhyUnavailable(); \
      !why.empty()) {                                                     \
    GTEST_SKIP() << "no test hosts on this machine: " << why;             \
  }

#endif  // PS_TESTS_HOSTS_SKIP_WITHOUT_HOSTS_H_
