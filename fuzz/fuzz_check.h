#ifndef PS_FUZZ_FUZZ_CHECK_H_
#define PS_FUZZ_FUZZ_CHECK_H_

// An invariant of the code under test that an input broke: printed, then
// abort(), which libFuzzer reports as a crash with the input saved.

#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(condition, ...)                                          \
  do {                                                                      \
    if (!(condition)) {                                                     \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__,  \
                   __LINE__, #condition, std::string(__VA_ARGS__).c_str()); \
      std::abort();                                                         \
    }                                                                       \
  } while (false)

#endif  // PS_FUZZ_FUZZ_CHECK_H_
