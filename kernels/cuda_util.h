#ifndef PS_KERNELS_CUDA_UTIL_H_
#define PS_KERNELS_CUDA_UTIL_H_

// Internal to the CUDA backend: CUDA/cuBLAS errors as absl::Status, owning
// handles for CUDA resources, and the backend's buffer type. Include only from
// CUDA-enabled sources.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"

namespace ps::kernels::cuda {

// "cudaMalloc" for the expression text "cudaMalloc(&ptr, bytes)".
inline absl::string_view CallName(absl::string_view expression) {
  return expression.substr(0, expression.find('('));
}

inline absl::Status CudaError(cudaError_t error, absl::string_view call) {
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (error) {
    case cudaErrorMemoryAllocation:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    default:
      break;
  }
  return absl::Status(
      code, absl::StrCat(call, " failed: ", cudaGetErrorString(error)));
}

inline absl::Status CublasError(cublasStatus_t status, absl::string_view call) {
  return absl::Status(
      status == CUBLAS_STATUS_ALLOC_FAILED
          ? absl::StatusCode::kResourceExhausted
          : absl::StatusCode::kInternal,
      absl::StrCat(call, " failed: ", cublasGetStatusString(status)));
}

}  // namespace ps::kernels::cuda

// Returns from the enclosing function with a Status naming the called
// function when `expr` (a CUDA runtime call) does not return cudaSuccess.
// The runtime also keeps a failure as its "last error", which the next
// kernel launch check would report again: it is reset once returned here.
#define PS_CUDA_RETURN_IF_ERROR(expr)                           \
  do {                                                          \
    if (const cudaError_t ps_cuda_error = (expr);               \
        ps_cuda_error != cudaSuccess) {                         \
      cudaGetLastError();                                       \
      return ::ps::kernels::cuda::CudaError(                    \
          ps_cuda_error, ::ps::kernels::cuda::CallName(#expr)); \
    }                                                           \
  } while (false)

// The same for a cuBLAS call.
#define PS_CUBLAS_RETURN_IF_ERROR(expr)                            \
  do {                                                             \
    if (const cublasStatus_t ps_cublas_status = (expr);            \
        ps_cublas_status != CUBLAS_STATUS_SUCCESS) {               \
      return ::ps::kernels::cuda::CublasError(                     \
          ps_cublas_status, ::ps::kernels::cuda::CallName(#expr)); \
    }                                                              \
  } while (false)

namespace ps::kernels::cuda {

// Deleters for the owning handles below. Errors on release cannot be
// reported (destructors) and leave nothing to undo, so they are dropped.
struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
struct PinnedFree {
  void operator()(void* p) const { cudaFreeHost(p); }
};
struct EventDestroy {
  void operator()(cudaEvent_t event) const { cudaEventDestroy(event); }
};
struct StreamDestroy {
  void operator()(cudaStream_t stream) const { cudaStreamDestroy(stream); }
};
struct CublasDestroy {
  void operator()(cublasHandle_t handle) const { cublasDestroy(handle); }
};

template <typename T>
using DeviceArray = std::unique_ptr<T[], DeviceFree>;
template <typename T>
using PinnedArray = std::unique_ptr<T[], PinnedFree>;
using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDestroy>;
using Stream =
    std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDestroy>;
using Cublas =
    std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasDestroy>;

// Device memory for `count` elements (none for 0).
template <typename T>
absl::Status AllocateDevice(size_t count, DeviceArray<T>& out) {
  out.reset();
  if (count == 0) return absl::OkStatus();
  void* p = nullptr;
  PS_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, count * sizeof(T)));
  out.reset(static_cast<T*>(p));
  return absl::OkStatus();
}

// Page-locked host memory for `count` elements, so copies can be async DMA.
template <typename T>
absl::Status AllocatePinned(size_t count, PinnedArray<T>& out) {
  out.reset();
  if (count == 0) return absl::OkStatus();
  void* p = nullptr;
  PS_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, count * sizeof(T)));
  out.reset(static_cast<T*>(p));
  return absl::OkStatus();
}

// An event used only for ordering (no timing, which makes it cheaper).
inline absl::Status CreateEvent(Event& out) {
  cudaEvent_t event = nullptr;
  PS_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  out.reset(event);
  return absl::OkStatus();
}

// Device memory plus the ordering state the backend keeps for it: the last
// work touching it on the compute stream and on the copy stream. That state
// changes when a const buffer is read, hence `mutable`.
class CudaBuffer final : public DeviceBuffer {
 public:
  explicit CudaBuffer(const void* owner) : owner_(owner) {}

  float* data() override { return data_.get(); }
  const float* data() const override { return data_.get(); }
  size_t size() const override { return size_; }

  absl::Status Init(size_t size) {
    if (absl::Status s = AllocateDevice(size, data_); !s.ok()) return s;
    size_ = size;
    if (absl::Status s = CreateEvent(compute_done); !s.ok()) return s;
    return CreateEvent(copy_done);
  }

  const void* owner() const { return owner_; }

  // Set when work was recorded in the event and the other stream has not
  // waited for it yet.
  mutable Event compute_done;
  mutable bool compute_pending = false;
  mutable Event copy_done;
  mutable bool copy_pending = false;

 private:
  const void* const owner_;  // The backend that allocated it; never used.
  DeviceArray<float> data_;
  size_t size_ = 0;
};

// Page-locked host memory that copies stage through, so that they run as
// DMA and may overlap compute. Allocated on first use and grown (at least
// doubling), never per call. Slots are handed out in order, as a ring: only
// when it is full, or must grow, does the host wait for the copies that may
// still use it (those enqueued before the last `Used`).
class StagingBuffer {
 public:
  absl::Status Init() { return CreateEvent(in_use_); }

  // Room for `n` floats.
  absl::StatusOr<float*> Slot(size_t n) {
    if (used_ + n > capacity_) {
      PS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(in_use_.get()));
      used_ = 0;
    }
    if (n > capacity_) {
      const size_t capacity = std::max({n, 2 * capacity_, kMinFloats});
      capacity_ = 0;
      if (absl::Status s = AllocatePinned(capacity, memory_); !s.ok()) {
        return s;
      }
      capacity_ = capacity;
    }
    float* slot = memory_.get() + used_;
    used_ += n;
    return slot;
  }

  // Marks the slots handed out so far as in use by the copies enqueued on
  // `stream` until now.
  absl::Status Used(cudaStream_t stream) {
    PS_CUDA_RETURN_IF_ERROR(cudaEventRecord(in_use_.get(), stream));
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kMinFloats = size_t{1} << 18;  // 1 MiB.

  PinnedArray<float> memory_;
  size_t capacity_ = 0;
  size_t used_ = 0;
  Event in_use_;
};

}  // namespace ps::kernels::cuda

#endif  // PS_KERNELS_CUDA_UTIL_H_
