// The CUDA backend's entry points for builds without nvcc (CUDA_ENABLED is
// False in @local_cuda//:defs.bzl), so that callers need no #ifdefs.

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda_backend.h"

namespace ps::kernels {

bool CudaCompiledIn() { return false; }

int CudaDeviceCount() { return 0; }

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_ordinal) {
  return absl::UnimplementedError(
      "cuda backend: this binary was built without CUDA (no nvcc found when "
      "building; see bazel/cuda_configure.bzl)");
}

}  // namespace ps::kernels
