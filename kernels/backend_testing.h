#ifndef PS_KERNELS_BACKEND_TESTING_H_
#define PS_KERNELS_BACKEND_TESTING_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"

// Helpers for tests of backends and of code running on them.

#define PS_TESTING_CONCAT_INNER_(a, b) a##b
#define PS_TESTING_CONCAT_(a, b) PS_TESTING_CONCAT_INNER_(a, b)

// Fails the test (returning from it) unless the absl::Status is OK.
#define PS_ASSERT_OK(expr)                                      \
  do {                                                          \
    const ::absl::Status ps_testing_status_ = (expr);           \
    ASSERT_TRUE(ps_testing_status_.ok()) << ps_testing_status_; \
  } while (false)

// `lhs = *expr` for an absl::StatusOr, failing the test if it is an error.
#define PS_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  PS_ASSERT_OK_AND_ASSIGN_IMPL_(           \
      PS_TESTING_CONCAT_(ps_testing_statusor_, __LINE__), lhs, expr)
#define PS_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  ASSERT_TRUE(statusor.ok()) << statusor.status();         \
  lhs = std::move(statusor).value()

namespace ps::kernels::testing {

// A new buffer of `backend` holding `values`.
absl::StatusOr<std::unique_ptr<DeviceBuffer>> Upload(
    Backend& backend, absl::Span<const float> values);

// The whole content of `buffer`.
absl::StatusOr<std::vector<float>> Download(Backend& backend,
                                            const DeviceBuffer& buffer);

// |v| elementwise: the magnitudes a reference sums for AllWithinRounding.
std::vector<float> Abs(std::vector<float> values);

// `n` NaNs: what an output buffer holds before a call that must write every
// element of it.
std::vector<float> Unwritten(uint64_t n);

// Succeeds if the spans have the same size and every element satisfies
// |got - want| <= atol + rtol * |want|; else names the first that does not.
::testing::AssertionResult AllNear(absl::Span<const float> got,
                                   absl::Span<const float> want, double atol,
                                   double rtol);

// Succeeds if the spans have the same size and every element satisfies
// |got - want| <= roundings * 2^-24 * magnitude: the bound on float32
// rounding of a sum whose terms' absolute values add up to `magnitude`
// (k + 3 roundings cover a k-term sum in any order, with or without FMA, and
// the rounding of `want` itself); else names the first that does not.
::testing::AssertionResult AllWithinRounding(absl::Span<const float> got,
                                             absl::Span<const float> want,
                                             absl::Span<const float> magnitude,
                                             double roundings);

// What a test that needs a CUDA device says when it skips without one.
inline constexpr char kNoCudaDevice[] = "no CUDA device: skipping";

// True when PS_REQUIRE_CUDA=1 (bazel test --test_env=...): on a GPU machine
// every skip for want of a device becomes a failure, so a run that passes
// really ran on the device.
bool RequireCuda();

}  // namespace ps::kernels::testing

#endif  // PS_KERNELS_BACKEND_TESTING_H_
