#ifndef PS_KERNELS_CPU_BACKEND_H_
#define PS_KERNELS_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace ps::kernels {

struct CpuBackendOptions {
  // Threads OpenBLAS may use for Gemm, in [1, 64]. Workers share the machine
  // with servers, so the default leaves the other cores to them.
  int num_threads = 1;
};

// Creates the host-memory backend: Gemm through OpenBLAS `cblas_sgemm`
// (row-major); convolutions image by image as im2col + sgemm (the data
// gradient through col2im); every other operation as plain loops, where sums
// over rows or channels accumulate in double (softmax subtracts the row
// maximum; the loss is a log-sum-exp) and pooling sums in float.
//
// Unlike the interface requires, every operation also checks its shapes
// against the sizes of its buffers and that the buffers came from a CPU
// backend, and returns InvalidArgument naming the operation instead of
// touching memory out of bounds. SoftmaxCrossEntropy returns InvalidArgument
// for a label that is not a whole number in [0, cols), and MaxPool2dBackward
// for an argmax that is not a position inside its output's window, before
// writing.
//
// Memory: the convolutions keep one image's im2col matrix (in_channels x
// kernel area x output area floats, Conv2dShape::im2col_size) as scratch
// owned by the backend, grown to exactly the largest layer seen and kept
// until the backend is destroyed (ConvScratchBytes, conv_scratch_bytes).
//
// Thread safety: one thread at a time, as for any Backend. The OpenBLAS thread
// count is process-wide state of the library: the last backend created sets it.
// Ownership: buffers from Allocate are owned by the caller and may outlive the
// backend. Operations complete before they return; Synchronize is a no-op.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(
    const CpuBackendOptions& options = CpuBackendOptions());

}  // namespace ps::kernels

#endif  // PS_KERNELS_CPU_BACKEND_H_
