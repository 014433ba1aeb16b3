#ifndef PS_KERNELS_DEVICE_H_
#define PS_KERNELS_DEVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"

namespace ps::kernels {

// Creates the backend a worker's `--device` flag names:
//   "cpu"     the OpenBLAS backend (`cpu_threads` OpenBLAS threads);
//   "cuda"    CUDA device 0, "cuda:<n>" device n;
//   "auto"    CUDA device 0 when this binary has CUDA and a device is found,
//             else the CPU backend.
// Logs the choice (and, for "auto", why). Fails with InvalidArgument for any
// other value, and with the CUDA backend's error when "cuda" was asked for
// but cannot be had (FailedPrecondition: no such device; Unimplemented:
// built without CUDA): an explicit request never falls back silently.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view device,
                                                       int cpu_threads = 1);

}  // namespace ps::kernels

#endif  // PS_KERNELS_DEVICE_H_
