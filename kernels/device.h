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
//   "cuda"    CUDA device LocalCudaOrdinal(local_rank, devices found), so
//             the workers of one host spread over its GPUs (what Horovod
//             scripts do with torch.cuda.set_device(hvd.local_rank()));
//             "cuda:<n>" device n whatever the local rank;
//   "auto"    that same device when this binary has CUDA and a device is
//             found that runs this build's code (CheckBackendRuns), else the
//             CPU backend, with a warning that says why (say, a GPU whose
//             architecture the build does not target).
// Logs the choice (and, for "auto", why). Fails with InvalidArgument for any
// other value, and with the CUDA backend's error when "cuda" was asked for
// but cannot be had (FailedPrecondition: no such device; Unimplemented:
// built without CUDA): an explicit request never falls back silently.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view device,
                                                       int cpu_threads = 1,
                                                       int local_rank = 0);

// The GPU of the worker of `local_rank` (its rank among its host's workers,
// >= 0) on a host with `device_count` GPUs: local_rank mod device_count, so
// more workers than GPUs share them evenly; 0 when there is none (the caller
// then fails to open it, naming the device).
int LocalCudaOrdinal(int local_rank, int device_count);

// Runs one of our kernels and one matrix product on a few numbers and checks
// the result. A CUDA device whose architecture this build has no code for
// fails here ("no kernel image is available for execution on the device"),
// rather than in the first training step.
absl::Status CheckBackendRuns(Backend& backend);

namespace internal {

// "auto" with the number of CUDA devices and a way to create the chosen
// device's backend given; CreateBackend passes the real ones. Exposed for
// tests.
absl::StatusOr<std::unique_ptr<Backend>> CreateAutoBackend(
    int cuda_devices,
    const std::function<absl::StatusOr<std::unique_ptr<Backend>>()>&
        create_cuda,
    int cpu_threads);

}  // namespace internal

}  // namespace ps::kernels

#endif  // PS_KERNELS_DEVICE_H_
