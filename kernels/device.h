#ifndef PS_KERNELS_DEVICE_H_
#define PS_KERNELS_DEVICE_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"

namespace ps::kernels {

// Creates the backend a worker's `--device` flag names:
//   "cpu"     the OpenBLAS backend (`cpu_threads` OpenBLAS threads);
//   "cuda"    CUDA device 0, "cuda:<n>" device n;
//   "auto"    CUDA device 0 when this binary has CUDA and a device is found
//             that runs this build's code (CheckBackendRuns), else the CPU
//             backend, with a warning that says why (say, a GPU whose
//             architecture the build does not target).
// Logs the choice (and, for "auto", why). Fails with InvalidArgument for any
// other value, and with the CUDA backend's error when "cuda" was asked for
// but cannot be had (FailedPrecondition: no such device; Unimplemented:
// built without CUDA): an explicit request never falls back silently.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view device,
                                                       int cpu_threads = 1);

// Runs one of our kernels and one matrix product on a few numbers and checks
// the result. A CUDA device whose architecture this build has no code for
// fails here ("no kernel image is available for execution on the device"),
// rather than in the first training step.
absl::Status CheckBackendRuns(Backend& backend);

namespace internal {

// "auto" with the number of CUDA devices and a way to create device 0's
// backend given; CreateBackend passes the real ones. Exposed for tests.
absl::StatusOr<std::unique_ptr<Backend>> CreateAutoBackend(
    int cuda_devices,
    const std::function<absl::StatusOr<std::unique_ptr<Backend>>()>&
        create_cuda,
    int cpu_threads);

}  // namespace internal

}  // namespace ps::kernels

#endif  // PS_KERNELS_DEVICE_H_
