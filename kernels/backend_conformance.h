#ifndef PS_KERNELS_BACKEND_CONFORMANCE_H_
#define PS_KERNELS_BACKEND_CONFORMANCE_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"

// Tests every Backend must pass: each operation on random data of awkward
// shapes (1, 3, 257; every transpose of Gemm) against the naive loops of
// kernels/reference_ops.h, plus copies at offsets and copies out of range
// (InvalidArgument, buffer untouched). A backend's test depends on
// //kernels:backend_conformance and instantiates the suite:
//
//   INSTANTIATE_TEST_SUITE_P(
//       Cuda, BackendConformanceTest,
//       ::testing::Values(ps::kernels::BackendParam{
//           "cuda", [] { return CreateCudaBackend(); }}),
//       ps::kernels::BackendParamName);
//
// A factory that returns Unavailable (say, no GPU on this machine) makes the
// tests skip; any other error fails them.
namespace ps::kernels {

struct BackendParam {
  std::string name;
  std::function<absl::StatusOr<std::unique_ptr<Backend>>()> create;
};

void PrintTo(const BackendParam& param, std::ostream* os);
std::string BackendParamName(
    const ::testing::TestParamInfo<BackendParam>& info);

class BackendConformanceTest : public ::testing::TestWithParam<BackendParam> {
 protected:
  void SetUp() override;

  std::unique_ptr<Backend> backend_;
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_BACKEND_CONFORMANCE_H_
