#include "kernels/backend_testing.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ps::kernels::testing {

absl::StatusOr<std::unique_ptr<DeviceBuffer>> Upload(
    Backend& backend, absl::Span<const float> values) {
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> buffer =
      backend.Allocate(values.size());
  if (!buffer.ok()) return buffer.status();
  if (absl::Status s =
          backend.CopyToDevice(values.data(), values.size(), **buffer, 0);
      !s.ok()) {
    return s;
  }
  return buffer;
}

absl::StatusOr<std::vector<float>> Download(Backend& backend,
                                            const DeviceBuffer& buffer) {
  std::vector<float> values(buffer.size());
  if (absl::Status s =
          backend.CopyToHost(buffer, 0, values.size(), values.data());
      !s.ok()) {
    return s;
  }
  return values;
}

std::vector<float> Abs(std::vector<float> values) {
  for (float& v : values) v = std::abs(v);
  return values;
}

std::vector<float> Unwritten(uint64_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

::testing::AssertionResult AllNear(absl::Span<const float> got,
                                   absl::Span<const float> want, double atol,
                                   double rtol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: got " << got.size() << ", want " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(static_cast<double>(got[i]) - want[i]);
    // Written so that a NaN on either side fails.
    if (!(diff <= atol + rtol * std::abs(static_cast<double>(want[i])))) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << got.size() << ": got " << got[i]
             << ", want " << want[i] << " (atol " << atol << ", rtol " << rtol
             << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult AllWithinRounding(absl::Span<const float> got,
                                             absl::Span<const float> want,
                                             absl::Span<const float> magnitude,
                                             double roundings) {
  if (got.size() != want.size() || got.size() != magnitude.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: got " << got.size() << ", want " << want.size()
           << ", magnitude " << magnitude.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(static_cast<double>(got[i]) - want[i]);
    const double bound = roundings * 0x1p-24 * magnitude[i];
    if (!(diff <= bound)) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << got.size() << ": got " << got[i]
             << ", want " << want[i] << ", off by " << diff << " > " << bound
             << " (" << roundings << " roundings of " << magnitude[i] << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

bool RequireCuda() {
  const char* value = std::getenv("PS_REQUIRE_CUDA");
  return value != nullptr && std::string(value) == "1";
}

}  // namespace ps::kernels::testing
