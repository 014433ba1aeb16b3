#ifndef PS_KERNELS_CUDA_BACKEND_H_
#define PS_KERNELS_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace ps::kernels {

// True when this binary was built with nvcc (the CUDA backend is real); when
// false, CreateCudaBackend always fails and CudaDeviceCount returns 0.
bool CudaCompiledIn();

// The number of CUDA devices usable by this process: 0 when CUDA is not
// compiled in, or there is no driver or no device. Never fails or crashes.
int CudaDeviceCount();

// Creates the backend for CUDA device `device_ordinal`: Gemm through cuBLAS
// (row-major by the operand swap), the other operations as our kernels
// (kernels/cuda_kernels.cu, kernels/cuda_cnn_kernels.cu), all on one compute
// stream. Convolutions are im2col (col2im for the data gradient) around one
// cuBLAS GEMM per chunk of images (kernels/cuda_conv.h); gradients of
// pooling and convolutions are gathered, not scattered with atomics, so
// every result repeats bit for bit.
//
// Memory: buffers from Allocate are device memory, zero-filled, freed by their
// destructor; Allocate is meant for set-up (once per model), not per step.
// The convolutions keep scratch device memory (a chunk of images' im2col
// matrix and reordered output: at most 64 MiB unless one image needs more),
// grown to the largest layer seen and kept until the backend is destroyed.
// Copies stage through pinned host buffers that are allocated once and grown,
// and run on a separate copy stream. Each device buffer records CUDA events
// for the last work touching it on either stream, so an operation waits only
// for the copies of its own buffers (and a copy only for the operations on
// its buffer): uploading the next layer's weights or downloading a finished
// gradient overlaps the compute of other layers.
//
// Like the CPU backend, operations check shapes against buffer sizes, and that
// buffers came from this backend, returning InvalidArgument before touching
// device memory. Two differences, as values on the device are not read
// before launching: a label that is not a class index makes
// SoftmaxCrossEntropy write NaN for its row and is reported (InvalidArgument
// naming the row) by the next Synchronize, or by a CopyToHost once that
// operation has finished, not by the call itself; and MaxPool2dBackward
// drops, rather than refuses, the gradient of an argmax that names no
// position of its window.
//
// Errors: every failing CUDA or cuBLAS call becomes a Status naming the call,
// e.g. "cudaMalloc failed: out of memory" (ResourceExhausted).
//
// Thread safety: one thread at a time, as for any Backend (the thread may
// change between calls; each call selects the device). Ownership: the caller
// owns buffers and must destroy them before the backend.
//
// Fails with FailedPrecondition when there is no such device, Unimplemented
// when CUDA is not compiled in.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_ordinal);

}  // namespace ps::kernels

#endif  // PS_KERNELS_CUDA_BACKEND_H_
