#include "kernels/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda_cnn_kernels.h"
#include "kernels/cuda_conv.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_util.h"
#include "kernels/dropout_mask.h"
#include "kernels/shape_checks.h"

namespace ps::kernels {
namespace {

using cuda::CudaBuffer;
using cuda::DeviceArray;
using cuda::Event;
using cuda::PinnedArray;

// One buffer argument of an operation and the floats its shape needs.
struct Arg {
  absl::string_view name;
  const DeviceBuffer* buffer;
  uint64_t needed;
};

// The checked buffers of one operation (at most four).
using Buffers = absl::InlinedVector<const CudaBuffer*, 4>;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  ~CudaBackend() override {
    // Nothing may still use the memory freed after this body.
    if (cudaSetDevice(device_) == cudaSuccess) {
      if (compute_ != nullptr) cudaStreamSynchronize(compute_.get());
      if (copy_ != nullptr) cudaStreamSynchronize(copy_.get());
    }
  }

  absl::Status Init() {
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

  std::string name() const override {
    return absl::StrFormat("cuda:%d", device_);
  }

  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(
      size_t num_elements) override {
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

  absl::Status CopyToDevice(const float* host, size_t num_elements,
                            DeviceBuffer& dst, size_t dst_offset) override {
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
    PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        dst.data() + dst_offset, *staging, num_elements * sizeof(float),
        cudaMemcpyHostToDevice, copy_.get()));
    if (absl::Status s = upload_.Used(copy_.get()); !s.ok()) return s;
    return AfterCopy(**buffer);
  }

  absl::Status CopyToHost(const DeviceBuffer& src, size_t src_offset,
                          size_t num_elements, float* host) override {
    absl::StatusOr<const CudaBuffer*> buffer =
        CheckRange("CopyToHost", host, num_elements, src, src_offset);
    if (!buffer.ok()) return buffer.status();
    if (num_elements == 0) return absl::OkStatus();
    PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    absl::StatusOr<float*> staging = download_.Slot(num_elements);
    if (!staging.ok()) return staging.status();
    if (absl::Status s = BeforeCopy(**buffer); !s.ok()) return s;
    PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        *staging, src.data() + src_offset, num_elements * sizeof(float),
        cudaMemcpyDeviceToHost, copy_.get()));
    if (absl::Status s = download_.Used(copy_.get()); !s.ok()) return s;
    if (absl::Status s = AfterCopy(**buffer); !s.ok()) return s;
    PS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize((*buffer)->copy_done.get()));
    std::memcpy(host, *staging, num_elements * sizeof(float));
    return CheckLabels(/*wait=*/false);
  }

  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const DeviceBuffer& a, const DeviceBuffer& b,
                    float beta, DeviceBuffer& c) override {
    if (absl::Status s = CheckGemmShape(m, n, k, a, b, c); !s.ok()) return s;
    absl::StatusOr<Buffers> buffers =
        CheckAll("Gemm", {{"a", &a, Product(m, k)},
                          {"b", &b, Product(k, n)},
                          {"c", &c, Product(m, n)}});
    if (!buffers.ok()) return buffers.status();
    if (m == 0 || n == 0) return absl::OkStatus();
    if (k == 0) {
      // BLAS rejects a zero leading dimension: C = beta * C by hand.
      return Enqueue(*buffers, "cuda::LaunchScale", [&] {
        return cuda::LaunchScale(Product(m, n), beta, c.data(), compute_.get());
      });
    }
    if (absl::Status s = BeforeCompute(*buffers); !s.ok()) return s;
    // cuBLAS is column-major, where row-major C (m x n) is C^T (n x m):
    // C^T = op(B)^T * op(A)^T, so B goes first and the shapes swap.
    PS_CUBLAS_RETURN_IF_ERROR(cublasSgemm(
        cublas_.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b.data(),
        trans_b ? k : n, a.data(), trans_a ? m : k, &beta, c.data(), n));
    return AfterCompute(*buffers);
  }

  absl::Status AddBias(int rows, int cols, const DeviceBuffer& bias,
                       DeviceBuffer& y) override {
    if (absl::Status s = CheckMatrix("AddBias", rows, cols); !s.ok()) return s;
    absl::StatusOr<Buffers> buffers = CheckAll(
        "AddBias",
        {{"bias", &bias, Product(1, cols)}, {"y", &y, Product(rows, cols)}});
    if (!buffers.ok()) return buffers.status();
    return Enqueue(*buffers, "cuda::LaunchAddBias", [&] {
      return cuda::LaunchAddBias(rows, cols, bias.data(), y.data(),
                                 compute_.get());
    });
  }

  absl::Status Relu(size_t n, const DeviceBuffer& x, DeviceBuffer& y) override {
    absl::StatusOr<Buffers> buffers =
        CheckAll("Relu", {{"x", &x, n}, {"y", &y, n}});
    if (!buffers.ok()) return buffers.status();
    return Enqueue(*buffers, "cuda::LaunchRelu", [&] {
      return cuda::LaunchRelu(n, x.data(), y.data(), compute_.get());
    });
  }

  absl::Status ReluGrad(size_t n, const DeviceBuffer& activation,
                        const DeviceBuffer& grad_y,
                        DeviceBuffer& grad_x) override {
    absl::StatusOr<Buffers> buffers =
        CheckAll("ReluGrad", {{"activation", &activation, n},
                              {"grad_y", &grad_y, n},
                              {"grad_x", &grad_x, n}});
    if (!buffers.ok()) return buffers.status();
    return Enqueue(*buffers, "cuda::LaunchReluGrad", [&] {
      return cuda::LaunchReluGrad(n, activation.data(), grad_y.data(),
                                  grad_x.data(), compute_.get());
    });
  }

  absl::Status SoftmaxCrossEntropy(int rows, int cols,
                                   const DeviceBuffer& logits,
                                   const DeviceBuffer& labels,
                                   DeviceBuffer& loss,
                                   DeviceBuffer& grad_logits) override {
    constexpr absl::string_view kOp = "SoftmaxCrossEntropy";
    if (absl::Status s = CheckClassMatrix(kOp, rows, cols); !s.ok()) return s;
    absl::StatusOr<Buffers> buffers =
        CheckAll(kOp, {{"logits", &logits, Product(rows, cols)},
                       {"labels", &labels, Product(rows, 1)},
                       {"loss", &loss, 1},
                       {"grad_logits", &grad_logits, Product(rows, cols)}});
    if (!buffers.ok()) return buffers.status();
    PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    if (static_cast<size_t>(rows) > row_loss_capacity_) {
      // Grows to the batch size once; cudaFree waits for its users.
      row_loss_capacity_ = 0;
      if (absl::Status s = cuda::AllocateDevice(rows, row_loss_); !s.ok()) {
        return s;
      }
      row_loss_capacity_ = rows;
    }
    auto launch = [&] {
      return cuda::LaunchSoftmaxCrossEntropy(
          rows, cols, logits.data(), labels.data(), row_loss_.get(),
          loss.data(), grad_logits.data(), bad_row_.get(), compute_.get());
    };
    if (absl::Status s =
            Enqueue(*buffers, "cuda::LaunchSoftmaxCrossEntropy", launch);
        !s.ok()) {
      return s;
    }
    // Fetch the label verdict for a later call to report (see CheckLabels).
    PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(bad_row_host_.get(), bad_row_.get(),
                                            sizeof(int), cudaMemcpyDeviceToHost,
                                            compute_.get()));
    PS_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(label_check_done_.get(), compute_.get()));
    label_check_pending_ = true;
    label_check_cols_ = cols;
    return absl::OkStatus();
  }

  absl::Status ColumnSum(int rows, int cols, const DeviceBuffer& x,
                         DeviceBuffer& out) override {
    if (absl::Status s = CheckMatrix("ColumnSum", rows, cols); !s.ok()) {
      return s;
    }
    absl::StatusOr<Buffers> buffers = CheckAll(
        "ColumnSum",
        {{"x", &x, Product(rows, cols)}, {"out", &out, Product(1, cols)}});
    if (!buffers.ok()) return buffers.status();
    return Enqueue(*buffers, "cuda::LaunchColumnSum", [&] {
      return cuda::LaunchColumnSum(rows, cols, x.data(), out.data(),
                                   compute_.get());
    });
  }

  absl::Status ArgmaxRows(int rows, int cols, const DeviceBuffer& x,
                          DeviceBuffer& out) override {
    if (absl::Status s = CheckArgmaxShape(rows, cols); !s.ok()) return s;
    absl::StatusOr<Buffers> buffers = CheckAll(
        "ArgmaxRows",
        {{"x", &x, Product(rows, cols)}, {"out", &out, Product(rows, 1)}});
    if (!buffers.ok()) return buffers.status();
    return Enqueue(*buffers, "cuda::LaunchArgmaxRows", [&] {
      return cuda::LaunchArgmaxRows(rows, cols, x.data(), out.data(),
                                    compute_.get());
    });
  }

  absl::Status Conv2dForward(const Conv2dShape& shape, const DeviceBuffer& x,
                             const DeviceBuffer& weights,
                             DeviceBuffer& y) override {
    constexpr absl::string_view kOp = "Conv2dForward";
    // Before the sizes below: they divide by the strides.
    if (absl::Status s = CheckConv2dShape(kOp, shape); !s.ok()) return s;
    absl::StatusOr<Buffers> buffers =
        CheckOutput(kOp, {{"x", &x, shape.input_size()},
                          {"weights", &weights, shape.weight_size()},
                          {"y", &y, shape.output_size()}});
    if (!buffers.ok()) return buffers.status();
    return RunConv(*buffers, [&] {
      return conv_.Forward(shape, x.data(), weights.data(), y.data());
    });
  }

  absl::Status Conv2dBackwardData(const Conv2dShape& shape,
                                  const DeviceBuffer& grad_y,
                                  const DeviceBuffer& weights,
                                  DeviceBuffer& grad_x) override {
    constexpr absl::string_view kOp = "Conv2dBackwardData";
    if (absl::Status s = CheckConv2dShape(kOp, shape); !s.ok()) return s;
    absl::StatusOr<Buffers> buffers =
        CheckOutput(kOp, {{"grad_y", &grad_y, shape.output_size()},
                          {"weights", &weights, shape.weight_size()},
                          {"grad_x", &grad_x, shape.input_size()}});
    if (!buffers.ok()) return buffers.status();
    return RunConv(*buffers, [&] {
      return conv_.BackwardData(shape, grad_y.data(), weights.data(),
                                grad_x.data());
    });
  }

  absl::Status Conv2dBackwardFilter(const Conv2dShape& shape,
                                    const DeviceBuffer& x,
                                    const DeviceBuffer& grad_y,
                                    DeviceBuffer& grad_weights) override {
    constexpr absl::string_view kOp = "Conv2dBackwardFilter";
    if (absl::Status s = CheckConv2dShape(kOp, shape); !s.ok()) return s;
    absl::StatusOr<Buffers> buffers = CheckOutput(
        kOp, {{"x", &x, shape.input_size()},
              {"grad_y", &grad_y, shape.output_size()},
              {"grad_weights", &grad_weights, shape.weight_size()}});
    if (!buffers.ok()) return buffers.status();
    return RunConv(*buffers, [&] {
      return conv_.BackwardFilter(shape, x.data(), grad_y.data(),
                                  grad_weights.data());
    });
  }

  absl::Status AddChannelBias(int batch, int channels, int spatial,
                              const DeviceBuffer& bias,
                              DeviceBuffer& y) override {
    constexpr absl::string_view kOp = "AddChannelBias";
    if (absl::Status s = CheckChannelShape(kOp, batch, channels, spatial);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<Buffers> buffers =
        CheckOutput(kOp, {{"bias", &bias, Product(1, channels)},
                          {"y", &y, Product(batch, channels) * spatial}});
    if (!buffers.ok()) return buffers.status();
    return Enqueue(*buffers, "cuda::LaunchAddChannelBias", [&] {
      return cuda::LaunchAddChannelBias(batch, channels, spatial, bias.data(),
                                        y.data(), compute_.get());
    });
  }

  absl::Status ChannelBiasGrad(int batch, int channels, int spatial,
                               const DeviceBuffer& grad_y,
                               DeviceBuffer& grad_bias) override {
    constexpr absl::string_view kOp = "ChannelBiasGrad";
    if (absl::Status s = CheckChannelShape(kOp, batch, channels, spatial);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<Buffers> buffers = CheckOutput(
        kOp, {{"grad_y", &grad_y, Product(batch, channels) * spatial},
              {"grad_bias", &grad_bias, Product(1, channels)}});
    if (!buffers.ok()) return buffers.status();
    return Enqueue(*buffers, "cuda::LaunchChannelBiasGrad", [&] {
      return cuda::LaunchChannelBiasGrad(batch, channels, spatial,
                                         grad_y.data(), grad_bias.data(),
                                         compute_.get());
    });
  }

  absl::Status MaxPool2dForward(const Pool2dShape& shape, const DeviceBuffer& x,
                                DeviceBuffer& y,
                                DeviceBuffer& argmax) override {
    constexpr absl::string_view kOp = "MaxPool2dForward";
    if (absl::Status s = CheckPool2dShape(kOp, shape); !s.ok()) return s;
    // Two outputs: each is checked against everything before it.
    absl::StatusOr<Buffers> buffers =
        CheckOutput(kOp, {{"x", &x, shape.input_size()},
                          {"argmax", &argmax, shape.output_size()},
                          {"y", &y, shape.output_size()}});
    if (!buffers.ok()) return buffers.status();
    if (absl::Status s = CheckNotAliased(kOp, "argmax", argmax, {&x});
        !s.ok()) {
      return s;
    }
    return Enqueue(*buffers, "cuda::LaunchMaxPoolForward", [&] {
      return cuda::LaunchMaxPoolForward(Geometry(shape), Planes(shape),
                                        x.data(), y.data(), argmax.data(),
                                        compute_.get());
    });
  }

  absl::Status MaxPool2dBackward(const Pool2dShape& shape,
                                 const DeviceBuffer& grad_y,
                                 const DeviceBuffer& argmax,
                                 DeviceBuffer& grad_x) override {
    constexpr absl::string_view kOp = "MaxPool2dBackward";
    if (absl::Status s = CheckPool2dShape(kOp, shape); !s.ok()) return s;
    absl::StatusOr<Buffers> buffers =
        CheckOutput(kOp, {{"grad_y", &grad_y, shape.output_size()},
                          {"argmax", &argmax, shape.output_size()},
                          {"grad_x", &grad_x, shape.input_size()}});
    if (!buffers.ok()) return buffers.status();
    return Enqueue(*buffers, "cuda::LaunchMaxPoolBackward", [&] {
      return cuda::LaunchMaxPoolBackward(Geometry(shape), Planes(shape),
                                         grad_y.data(), argmax.data(),
                                         grad_x.data(), compute_.get());
    });
  }

  absl::Status AvgPool2dForward(const Pool2dShape& shape, const DeviceBuffer& x,
                                DeviceBuffer& y) override {
    constexpr absl::string_view kOp = "AvgPool2dForward";
    if (absl::Status s = CheckPool2dShape(kOp, shape); !s.ok()) return s;
    absl::StatusOr<Buffers> buffers = CheckOutput(
        kOp, {{"x", &x, shape.input_size()}, {"y", &y, shape.output_size()}});
    if (!buffers.ok()) return buffers.status();
    return Enqueue(*buffers, "cuda::LaunchAvgPoolForward", [&] {
      return cuda::LaunchAvgPoolForward(Geometry(shape), Planes(shape),
                                        x.data(), y.data(), compute_.get());
    });
  }

  absl::Status AvgPool2dBackward(const Pool2dShape& shape,
                                 const DeviceBuffer& grad_y,
                                 DeviceBuffer& grad_x) override {
    constexpr absl::string_view kOp = "AvgPool2dBackward";
    if (absl::Status s = CheckPool2dShape(kOp, shape); !s.ok()) return s;
    absl::StatusOr<Buffers> buffers =
        CheckOutput(kOp, {{"grad_y", &grad_y, shape.output_size()},
                          {"grad_x", &grad_x, shape.input_size()}});
    if (!buffers.ok()) return buffers.status();
    return Enqueue(*buffers, "cuda::LaunchAvgPoolBackward", [&] {
      return cuda::LaunchAvgPoolBackward(Geometry(shape), Planes(shape),
                                         grad_y.data(), grad_x.data(),
                                         compute_.get());
    });
  }

  absl::Status DropoutForward(size_t n, const DropoutMask& mask,
                              const DeviceBuffer& x, DeviceBuffer& y) override {
    return Dropout({"DropoutForward", "x", "y"}, n, mask, x, y);
  }

  absl::Status DropoutBackward(size_t n, const DropoutMask& mask,
                               const DeviceBuffer& grad_y,
                               DeviceBuffer& grad_x) override {
    return Dropout({"DropoutBackward", "grad_y", "grad_x"}, n, mask, grad_y,
                   grad_x);
  }

  absl::Status Synchronize() override {
    PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    PS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_.get()));
    PS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_.get()));
    return CheckLabels(/*wait=*/true);
  }

 private:
  // The buffer as ours, if this backend allocated it and it holds at least
  // `needed` floats. Another backend's memory may not be device memory.
  absl::StatusOr<const CudaBuffer*> Check(absl::string_view op,
                                          absl::string_view arg,
                                          const DeviceBuffer& buffer,
                                          uint64_t needed) const {
    const auto* ours = dynamic_cast<const CudaBuffer*>(&buffer);
    if (ours == nullptr || ours->owner() != this) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: buffer `%s` was not allocated by this %s backend", op, arg,
          name()));
    }
    if (absl::Status s = CheckBufferSize(op, arg, buffer, needed); !s.ok()) {
      return s;
    }
    return ours;
  }

  absl::StatusOr<Buffers> CheckAll(absl::string_view op,
                                   std::initializer_list<Arg> args) const {
    Buffers buffers;
    for (const Arg& arg : args) {
      absl::StatusOr<const CudaBuffer*> ours =
          Check(op, arg.name, *arg.buffer, arg.needed);
      if (!ours.ok()) return ours.status();
      buffers.push_back(*ours);
    }
    return buffers;
  }

  // Enqueues `launch` (returning a cudaError_t) on the compute stream,
  // ordered against the copies of `buffers`.
  template <typename Launch>
  absl::Status Enqueue(const Buffers& buffers, absl::string_view launcher,
                       Launch launch) {
    if (absl::Status s = BeforeCompute(buffers); !s.ok()) return s;
    if (const cudaError_t error = launch(); error != cudaSuccess) {
      cudaGetLastError();  // Reported here; not again by the next launch.
      return cuda::CudaError(error, launcher);
    }
    return AfterCompute(buffers);
  }

  absl::StatusOr<const CudaBuffer*> CheckRange(absl::string_view op,
                                               const float* host,
                                               size_t num_elements,
                                               const DeviceBuffer& buffer,
                                               size_t offset) const {
    if (host == nullptr && num_elements > 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: null host pointer", op));
    }
    absl::StatusOr<const CudaBuffer*> ours = Check(op, "buffer", buffer, 0);
    if (!ours.ok()) return ours.status();
    if (offset > buffer.size() || num_elements > buffer.size() - offset) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %d floats at offset %d do not fit a buffer of %d", op,
          num_elements, offset, buffer.size()));
    }
    return ours;
  }

  // Compute on `buffers` waits for copies still writing or reading them.
  // Also selects the device, which every operation needs first.
  absl::Status BeforeCompute(const Buffers& buffers) {
    PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    for (const CudaBuffer* buffer : buffers) {
      if (!buffer->copy_pending) continue;
      PS_CUDA_RETURN_IF_ERROR(
          cudaStreamWaitEvent(compute_.get(), buffer->copy_done.get(), 0));
      buffer->copy_pending = false;
    }
    return absl::OkStatus();
  }

  absl::Status AfterCompute(const Buffers& buffers) {
    for (const CudaBuffer* buffer : buffers) {
      PS_CUDA_RETURN_IF_ERROR(
          cudaEventRecord(buffer->compute_done.get(), compute_.get()));
      buffer->compute_pending = true;
    }
    return absl::OkStatus();
  }

  // A copy of `buffer` waits only for the compute on that buffer.
  absl::Status BeforeCopy(const CudaBuffer& buffer) {
    if (!buffer.compute_pending) return absl::OkStatus();
    PS_CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(copy_.get(), buffer.compute_done.get(), 0));
    buffer.compute_pending = false;
    return absl::OkStatus();
  }

  absl::Status AfterCopy(const CudaBuffer& buffer) {
    PS_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(buffer.copy_done.get(), copy_.get()));
    buffer.copy_pending = true;
    return absl::OkStatus();
  }

  // CheckAll, then that the last argument (the output) is none of the others.
  absl::StatusOr<Buffers> CheckOutput(absl::string_view op,
                                      std::initializer_list<Arg> args) const {
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

  // `run` enqueues a convolution pass (which may allocate scratch, so the
  // device is selected first) ordered against the copies of `buffers`.
  template <typename Run>
  absl::Status RunConv(const Buffers& buffers, Run run) {
    if (absl::Status s = BeforeCompute(buffers); !s.ok()) return s;
    if (absl::Status s = run(); !s.ok()) return s;
    return AfterCompute(buffers);
  }

  static cuda::PoolGeometry Geometry(const Pool2dShape& s) {
    return cuda::PoolGeometry{s.in_height,    s.in_width,      s.window_height,
                              s.window_width, s.stride_height, s.stride_width,
                              s.out_height(), s.out_width()};
  }

  static size_t Planes(const Pool2dShape& s) {
    return static_cast<size_t>(Product(s.batch, s.channels));
  }

  struct DropoutNames {
    absl::string_view op, in, out;
  };

  // Both directions apply the same mask; only the names differ.
  absl::Status Dropout(const DropoutNames& names, size_t n,
                       const DropoutMask& mask, const DeviceBuffer& in,
                       DeviceBuffer& out) {
    if (absl::Status s = CheckDropoutMask(names.op, mask); !s.ok()) return s;
    absl::StatusOr<Buffers> buffers =
        CheckAll(names.op, {{names.in, &in, n}, {names.out, &out, n}});
    if (!buffers.ok()) return buffers.status();
    return Enqueue(*buffers, "cuda::LaunchDropout", [&] {
      return cuda::LaunchDropout(
          n, dropout::StepKey(mask.seed, mask.step), mask.first_index,
          dropout::DropThreshold(mask.rate), dropout::KeepScale(mask.rate),
          in.data(), out.data(), compute_.get());
    });
  }

  // Reports a bad label seen by a SoftmaxCrossEntropy whose verdict has
  // arrived: waiting for it when `wait`, else only if it already has.
  absl::Status CheckLabels(bool wait) {
    if (!label_check_pending_) return absl::OkStatus();
    if (wait) {
      PS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(label_check_done_.get()));
    } else {
      const cudaError_t state = cudaEventQuery(label_check_done_.get());
      if (state == cudaErrorNotReady) {
        // "Not ready" is no failure: keep it from reaching a launch check.
        if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
        return absl::OkStatus();
      }
      if (state != cudaSuccess) return cuda::CudaError(state, "cudaEventQuery");
    }
    label_check_pending_ = false;
    const int bad_row = bad_row_host_[0];
    if (bad_row == 0) return absl::OkStatus();
    bad_row_host_[0] = 0;
    PS_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(bad_row_.get(), 0, sizeof(int), compute_.get()));
    return absl::InvalidArgumentError(absl::StrFormat(
        "SoftmaxCrossEntropy: the label of row %d is not a class index in "
        "[0, %d); its loss and gradient are NaN",
        bad_row - 1, label_check_cols_));
  }

  const int device_;
  // Declared before what uses them, so they are destroyed last.
  cuda::Stream compute_;   // Every operation, in issue order.
  cuda::Stream copy_;      // Host <-> device copies.
  cuda::Cublas cublas_;    // Bound to compute_.
  cuda::ConvRunner conv_;  // On compute_ through cublas_; owns its scratch.

  cuda::StagingBuffer upload_;    // Host -> device copies.
  cuda::StagingBuffer download_;  // Device -> host copies.

  DeviceArray<float> row_loss_;  // SoftmaxCrossEntropy scratch.
  size_t row_loss_capacity_ = 0;
  DeviceArray<int> bad_row_;       // 1 + a row with a bad label, or 0.
  PinnedArray<int> bad_row_host_;  // Its copy, valid after the event below.
  Event label_check_done_;
  bool label_check_pending_ = false;
  int label_check_cols_ = 0;
};

}  // namespace

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
  auto backend = std::make_unique<CudaBackend>(device_ordinal);
  if (absl::Status s = backend->Init(); !s.ok()) return s;
  return backend;
}

}  // namespace ps::kernels
