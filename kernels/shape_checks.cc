#include "kernels/shape_checks.h"

#include "absl/strings/str_format.h"

namespace ps::kernels {

uint64_t Product(int a, int b) {
  return static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
}

absl::Status CheckMatrix(absl::string_view op, int rows, int cols) {
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: negative shape rows=%d cols=%d", op, rows, cols));
  }
  return absl::OkStatus();
}

absl::Status CheckGemmShape(int m, int n, int k, const DeviceBuffer& a,
                            const DeviceBuffer& b, const DeviceBuffer& c) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Gemm: negative shape m=%d n=%d k=%d", m, n, k));
  }
  if (&c == &a || &c == &b) {
    return absl::InvalidArgumentError(
        "Gemm: the output `c` must not be one of the inputs");
  }
  return absl::OkStatus();
}

absl::Status CheckClassMatrix(absl::string_view op, int rows, int cols) {
  if (rows < 1 || cols < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: needs at least one row and one class, got rows=%d cols=%d", op,
        rows, cols));
  }
  return absl::OkStatus();
}

absl::Status CheckArgmaxShape(int rows, int cols) {
  if (absl::Status s = CheckMatrix("ArgmaxRows", rows, cols); !s.ok()) {
    return s;
  }
  if (cols < 1 && rows > 0) {
    return absl::InvalidArgumentError("ArgmaxRows: rows have no columns");
  }
  return absl::OkStatus();
}

absl::Status CheckBufferSize(absl::string_view op, absl::string_view arg,
                             const DeviceBuffer& buffer, uint64_t needed) {
  if (buffer.size() < needed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: buffer `%s` holds %d floats but the shape needs %d", op, arg,
        buffer.size(), needed));
  }
  return absl::OkStatus();
}

}  // namespace ps::kernels
