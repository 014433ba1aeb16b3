// The CUDA backend's set-up, device memory, copies and the stream ordering
// every operation goes through; its operations are in cuda_dense_ops.cc and
// cuda_cnn_ops.cc.
#include "kernels/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda_backend_internal.h"
#include "kernels/cuda_util.h"
#include "kernels/shape_checks.h"

namespace ps::kernels {
namespace cuda {

CudaBackend::~CudaBackend() {
  // Nothing may still use the memory freed after this body.
  if (cudaSetDevice(device_) == cudaSuccess) {
    if (compute_ != nullptr) cudaStreamSynchronize(compute_.get());
    if (copy_ != nullptr) cudaStreamSynchronize(copy_.get());
  }
}

absl::Status CudaBackend::Init() {
  PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  cudaStream_t stream = nullptr;
  PS_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  compute_.reset(stream);
  PS_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  copy_.reset(stream);
  cublasHandle_t handle = nullptr;
  PS_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
  cublas_.reset(handle);
  PS_CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_.get(), compute_.get()));
  // Plain FP32 (no TF32 tensor cores), so results track the CPU backend.
  PS_CUBLAS_RETURN_IF_ERROR(
      cublasSetMathMode(cublas_.get(), CUBLAS_DEFAULT_MATH));
  conv_.Bind(cublas_.get(), compute_.get());
  if (absl::Status s = upload_.Init(); !s.ok()) return s;
  if (absl::Status s = download_.Init(); !s.ok()) return s;
  if (absl::Status s = cuda::CreateEvent(label_check_done_); !s.ok()) {
    return s;
  }
  if (absl::Status s = cuda::AllocateDevice(1, bad_row_); !s.ok()) return s;
  if (absl::Status s = cuda::AllocatePinned(1, bad_row_host_); !s.ok()) {
    return s;
  }
  bad_row_host_[0] = 0;
  // On compute_ (not the legacy stream, which does not order with it).
  PS_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(bad_row_.get(), 0, sizeof(int), compute_.get()));
  return absl::OkStatus();
}

std::string CudaBackend::name() const {
  return absl::StrFormat("cuda:%d", device_);
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> CudaBackend::Allocate(
    size_t num_elements) {
  if (num_elements > std::numeric_limits<size_t>::max() / sizeof(float)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "Allocate: %d floats do not fit in memory", num_elements));
  }
  PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  auto buffer = std::make_unique<CudaBuffer>(this);
  if (absl::Status s = buffer->Init(num_elements); !s.ok()) return s;
  if (num_elements > 0) {
    PS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
        buffer->data(), 0, num_elements * sizeof(float), compute_.get()));
    if (absl::Status s = AfterCompute(Buffers{buffer.get()}); !s.ok()) {
      return s;
    }
  }
  return buffer;
}

absl::Status CudaBackend::CopyToDevice(const float* host, size_t num_elements,
                                       DeviceBuffer& dst, size_t dst_offset) {
  absl::StatusOr<const CudaBuffer*> buffer =
      CheckRange("CopyToDevice", host, num_elements, dst, dst_offset);
  if (!buffer.ok()) return buffer.status();
  if (num_elements == 0) return absl::OkStatus();
  PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  absl::StatusOr<float*> staging = upload_.Slot(num_elements);
  if (!staging.ok()) return staging.status();
  // `host` is free for reuse once it is in the staging buffer.
  std::memcpy(*staging, host, num_elements * sizeof(float));
  if (absl::Status s = BeforeCopy(**buffer); !s.ok()) return s;
  PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.data() + dst_offset, *staging,
                                          num_elements * sizeof(float),
                                          cudaMemcpyHostToDevice, copy_.get()));
  if (absl::Status s = upload_.Used(copy_.get()); !s.ok()) return s;
  return AfterCopy(**buffer);
}

absl::Status CudaBackend::CopyToHost(const DeviceBuffer& src, size_t src_offset,
                                     size_t num_elements, float* host) {
  absl::StatusOr<const CudaBuffer*> buffer =
      CheckRange("CopyToHost", host, num_elements, src, src_offset);
  if (!buffer.ok()) return buffer.status();
  if (num_elements == 0) return absl::OkStatus();
  PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  absl::StatusOr<float*> staging = download_.Slot(num_elements);
  if (!staging.ok()) return staging.status();
  if (absl::Status s = BeforeCopy(**buffer); !s.ok()) return s;
  PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(*staging, src.data() + src_offset,
                                          num_elements * sizeof(float),
                                          cudaMemcpyDeviceToHost, copy_.get()));
  if (absl::Status s = download_.Used(copy_.get()); !s.ok()) return s;
  if (absl::Status s = AfterCopy(**buffer); !s.ok()) return s;
  PS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize((*buffer)->copy_done.get()));
  std::memcpy(host, *staging, num_elements * sizeof(float));
  return CheckLabels(/*wait=*/false);
}

absl::Status CudaBackend::Synchronize() {
  PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  PS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_.get()));
  PS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_.get()));
  return CheckLabels(/*wait=*/true);
}

absl::StatusOr<const CudaBuffer*> CudaBackend::Check(absl::string_view op,
                                                     absl::string_view arg,
                                                     const DeviceBuffer& buffer,
                                                     uint64_t needed) const {
  const auto* ours = dynamic_cast<const CudaBuffer*>(&buffer);
  if (ours == nullptr || ours->owner() != this) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: buffer `%s` was not allocated by this %s backend",
                        op, arg, name()));
  }
  if (absl::Status s = CheckBufferSize(op, arg, buffer, needed); !s.ok()) {
    return s;
  }
  return ours;
}

absl::StatusOr<Buffers> CudaBackend::CheckAll(
    absl::string_view op, std::initializer_list<Arg> args) const {
  Buffers buffers;
  for (const Arg& arg : args) {
    absl::StatusOr<const CudaBuffer*> ours =
        Check(op, arg.name, *arg.buffer, arg.needed);
    if (!ours.ok()) return ours.status();
    buffers.push_back(*ours);
  }
  return buffers;
}

absl::StatusOr<const CudaBuffer*> CudaBackend::CheckRange(
    absl::string_view op, const float* host, size_t num_elements,
    const DeviceBuffer& buffer, size_t offset) const {
  if (host == nullptr && num_elements > 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: null host pointer", op));
  }
  absl::StatusOr<const CudaBuffer*> ours = Check(op, "buffer", buffer, 0);
  if (!ours.ok()) return ours.status();
  if (offset > buffer.size() || num_elements > buffer.size() - offset) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d floats at offset %d do not fit a buffer of %d",
                        op, num_elements, offset, buffer.size()));
  }
  return ours;
}

absl::Status CudaBackend::BeforeCompute(const Buffers& buffers) {
  PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  for (const CudaBuffer* buffer : buffers) {
    if (!buffer->copy_pending) continue;
    PS_CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(compute_.get(), buffer->copy_done.get(), 0));
    buffer->copy_pending = false;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::AfterCompute(const Buffers& buffers) {
  for (const CudaBuffer* buffer : buffers) {
    PS_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(buffer->compute_done.get(), compute_.get()));
    buffer->compute_pending = true;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::BeforeCopy(const CudaBuffer& buffer) {
  if (!buffer.compute_pending) return absl::OkStatus();
  PS_CUDA_RETURN_IF_ERROR(
      cudaStreamWaitEvent(copy_.get(), buffer.compute_done.get(), 0));
  buffer.compute_pending = false;
  return absl::OkStatus();
}

absl::Status CudaBackend::AfterCopy(const CudaBuffer& buffer) {
  PS_CUDA_RETURN_IF_ERROR(cudaEventRecord(buffer.copy_done.get(), copy_.get()));
  buffer.copy_pending = true;
  return absl::OkStatus();
}

absl::StatusOr<Buffers> CudaBackend::CheckOutput(
    absl::string_view op, std::initializer_list<Arg> args) const {
  absl::StatusOr<Buffers> buffers = CheckAll(op, args);
  if (!buffers.ok()) return buffers;
  const Arg& out = *(args.end() - 1);
  for (const Arg* in = args.begin(); in != args.end() - 1; ++in) {
    if (absl::Status s =
            CheckNotAliased(op, out.name, *out.buffer, {in->buffer});
        !s.ok()) {
      return s;
    }
  }
  return buffers;
}

}  // namespace cuda

bool CudaCompiledIn() { return true; }

int CudaDeviceCount() {
  int count = 0;
  // No driver or no device is an answer here, not an error.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // Clear it so later calls do not see it.
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_ordinal) {
  const int count = CudaDeviceCount();
  if (device_ordinal < 0 || device_ordinal >= count) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cuda backend: no CUDA device %d (%d found)", device_ordinal, count));
  }
  auto backend = std::make_unique<cuda::CudaBackend>(device_ordinal);
  if (absl::Status s = backend->Init(); !s.ok()) return s;
  return backend;
}

}  // namespace ps::kernels
