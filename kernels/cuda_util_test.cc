#include "kernels/cuda_util.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/cuda_backend.h"

// How CUDA and cuBLAS failures become absl::Status. Runs without a GPU:
// cudart and cuBLAS describe their error codes without a driver.
namespace ps::kernels::cuda {
namespace {

cudaError_t FailingCudaCall(int) { return cudaErrorInvalidValue; }
cublasStatus_t FailingCublasCall() { return CUBLAS_STATUS_ALLOC_FAILED; }

absl::Status UsesCudaMacro() {
  PS_CUDA_RETURN_IF_ERROR(FailingCudaCall(42));
  return absl::OkStatus();
}

absl::Status UsesCublasMacro() {
  PS_CUBLAS_RETURN_IF_ERROR(FailingCublasCall());
  return absl::OkStatus();
}

TEST(CudaErrorTest, OutOfMemoryIsResourceExhaustedNamingTheCall) {
  const absl::Status status =
      CudaError(cudaErrorMemoryAllocation, "cudaMalloc");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(), "cudaMalloc failed: out of memory");
}

TEST(CudaErrorTest, MissingDeviceIsFailedPrecondition) {
  for (cudaError_t error : {cudaErrorNoDevice, cudaErrorInsufficientDriver}) {
    EXPECT_EQ(CudaError(error, "cudaSetDevice").code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

TEST(CudaErrorTest, MacroReturnsStatusNamingTheFunctionCalled) {
  const absl::Status status = UsesCudaMacro();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), "FailingCudaCall failed: invalid argument");
}

TEST(CudaErrorTest, CublasMacroNamesTheCallAndTheCublasStatus) {
  const absl::Status status = UsesCublasMacro();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(),
            absl::StrCat("FailingCublasCall failed: ",
                         cublasGetStatusString(CUBLAS_STATUS_ALLOC_FAILED)));
}

// On a machine without a GPU, a real runtime call must fail cleanly.
TEST(CudaErrorTest, RealCallWithoutDeviceFailsNamingIt) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  DeviceArray<float> memory;
  const absl::Status status = AllocateDevice(16, memory);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_EQ(status.message().rfind("cudaMalloc failed: ", 0), 0u) << status;
  EXPECT_EQ(memory, nullptr);
}

}  // namespace
}  // namespace ps::kernels::cuda
