#include "kernels/device.h"

#include <memory>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cuda_backend.h"

namespace ps::kernels {
namespace {

TEST(CreateBackendTest, CpuIsChosenByName) {
  PS_ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend("cpu"));
  EXPECT_EQ(backend->name(), "cpu");
}

TEST(CreateBackendTest, AutoPicksCudaExactlyWhenADeviceIsFound) {
  PS_ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend("auto"));
  EXPECT_EQ(backend->name(), CudaDeviceCount() > 0 ? "cuda:0" : "cpu");
}

TEST(CreateBackendTest, ExplicitCudaNeverFallsBackToCpu) {
  auto backend = CreateBackend("cuda");
  if (CudaDeviceCount() > 0) {
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->name(), "cuda:0");
  } else {
    EXPECT_EQ(backend.status().code(),
              CudaCompiledIn() ? absl::StatusCode::kFailedPrecondition
                               : absl::StatusCode::kUnimplemented)
        << backend.status();
  }
}

TEST(CreateBackendTest, RejectsCudaOrdinalWithoutDevice) {
  const absl::Status status = CreateBackend("cuda:4096").status();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST(CreateBackendTest, RejectsUnknownDeviceNames) {
  for (const char* device : {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:+1",
                             "cuda: 1", "cuda:x", "cuda0", "auto "}) {
    SCOPED_TRACE(device);
    const absl::Status status = CreateBackend(device).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("--device"), absl::string_view::npos);
  }
}

TEST(CreateBackendTest, PassesCpuThreadCountThroughItsValidation) {
  EXPECT_EQ(CreateBackend("cpu", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::kernels
