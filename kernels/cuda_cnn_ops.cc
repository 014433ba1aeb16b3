// The CUDA backend's convolution (kernels/cuda_conv.h), channel bias, pooling
// and dropout: shapes and buffers checked, then launches of
// kernels/cuda_cnn_kernels.cu on the compute stream.
#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda_backend_internal.h"
#include "kernels/cuda_cnn_kernels.h"
#include "kernels/dropout_mask.h"
#include "kernels/shape_checks.h"

namespace ps::kernels::cuda {
namespace {

cuda::PoolGeometry Geometry(const Pool2dShape& s) {
  return cuda::PoolGeometry{s.in_height,    s.in_width,      s.window_height,
                            s.window_width, s.stride_height, s.stride_width,
                            s.out_height(), s.out_width()};
}

size_t Planes(const Pool2dShape& s) {
  return static_cast<size_t>(Product(s.batch, s.channels));
}

}  // namespace

absl::Status CudaBackend::Conv2dForward(const Conv2dShape& shape,
                                        const DeviceBuffer& x,
                                        const DeviceBuffer& weights,
                                        DeviceBuffer& y) {
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

absl::Status CudaBackend::Conv2dBackwardData(const Conv2dShape& shape,
                                             const DeviceBuffer& grad_y,
                                             const DeviceBuffer& weights,
                                             DeviceBuffer& grad_x) {
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

absl::Status CudaBackend::Conv2dBackwardFilter(const Conv2dShape& shape,
                                               const DeviceBuffer& x,
                                               const DeviceBuffer& grad_y,
                                               DeviceBuffer& grad_weights) {
  constexpr absl::string_view kOp = "Conv2dBackwardFilter";
  if (absl::Status s = CheckConv2dShape(kOp, shape); !s.ok()) return s;
  absl::StatusOr<Buffers> buffers =
      CheckOutput(kOp, {{"x", &x, shape.input_size()},
                        {"grad_y", &grad_y, shape.output_size()},
                        {"grad_weights", &grad_weights, shape.weight_size()}});
  if (!buffers.ok()) return buffers.status();
  return RunConv(*buffers, [&] {
    return conv_.BackwardFilter(shape, x.data(), grad_y.data(),
                                grad_weights.data());
  });
}

absl::Status CudaBackend::AddChannelBias(int batch, int channels, int spatial,
                                         const DeviceBuffer& bias,
                                         DeviceBuffer& y) {
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

absl::Status CudaBackend::ChannelBiasGrad(int batch, int channels, int spatial,
                                          const DeviceBuffer& grad_y,
                                          DeviceBuffer& grad_bias) {
  constexpr absl::string_view kOp = "ChannelBiasGrad";
  if (absl::Status s = CheckChannelShape(kOp, batch, channels, spatial);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<Buffers> buffers =
      CheckOutput(kOp, {{"grad_y", &grad_y, Product(batch, channels) * spatial},
                        {"grad_bias", &grad_bias, Product(1, channels)}});
  if (!buffers.ok()) return buffers.status();
  return Enqueue(*buffers, "cuda::LaunchChannelBiasGrad", [&] {
    return cuda::LaunchChannelBiasGrad(batch, channels, spatial, grad_y.data(),
                                       grad_bias.data(), compute_.get());
  });
}

absl::Status CudaBackend::MaxPool2dForward(const Pool2dShape& shape,
                                           const DeviceBuffer& x,
                                           DeviceBuffer& y,
                                           DeviceBuffer& argmax) {
  constexpr absl::string_view kOp = "MaxPool2dForward";
  if (absl::Status s = CheckPool2dShape(kOp, shape); !s.ok()) return s;
  // Two outputs: each is checked against everything before it.
  absl::StatusOr<Buffers> buffers =
      CheckOutput(kOp, {{"x", &x, shape.input_size()},
                        {"argmax", &argmax, shape.output_size()},
                        {"y", &y, shape.output_size()}});
  if (!buffers.ok()) return buffers.status();
  if (absl::Status s = CheckNotAliased(kOp, "argmax", argmax, {&x}); !s.ok()) {
    return s;
  }
  return Enqueue(*buffers, "cuda::LaunchMaxPoolForward", [&] {
    return cuda::LaunchMaxPoolForward(Geometry(shape), Planes(shape), x.data(),
                                      y.data(), argmax.data(), compute_.get());
  });
}

absl::Status CudaBackend::MaxPool2dBackward(const Pool2dShape& shape,
                                            const DeviceBuffer& grad_y,
                                            const DeviceBuffer& argmax,
                                            DeviceBuffer& grad_x) {
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

absl::Status CudaBackend::AvgPool2dForward(const Pool2dShape& shape,
                                           const DeviceBuffer& x,
                                           DeviceBuffer& y) {
  constexpr absl::string_view kOp = "AvgPool2dForward";
  if (absl::Status s = CheckPool2dShape(kOp, shape); !s.ok()) return s;
  absl::StatusOr<Buffers> buffers = CheckOutput(
      kOp, {{"x", &x, shape.input_size()}, {"y", &y, shape.output_size()}});
  if (!buffers.ok()) return buffers.status();
  return Enqueue(*buffers, "cuda::LaunchAvgPoolForward", [&] {
    return cuda::LaunchAvgPoolForward(Geometry(shape), Planes(shape), x.data(),
                                      y.data(), compute_.get());
  });
}

absl::Status CudaBackend::AvgPool2dBackward(const Pool2dShape& shape,
                                            const DeviceBuffer& grad_y,
                                            DeviceBuffer& grad_x) {
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

absl::Status CudaBackend::DropoutForward(size_t n, const DropoutMask& mask,
                                         const DeviceBuffer& x,
                                         DeviceBuffer& y) {
  return Dropout({"DropoutForward", "x", "y"}, n, mask, x, y);
}

absl::Status CudaBackend::DropoutBackward(size_t n, const DropoutMask& mask,
                                          const DeviceBuffer& grad_y,
                                          DeviceBuffer& grad_x) {
  return Dropout({"DropoutBackward", "grad_y", "grad_x"}, n, mask, grad_y,
                 grad_x);
}

absl::Status CudaBackend::Dropout(const DropoutNames& names, size_t n,
                                  const DropoutMask& mask,
                                  const DeviceBuffer& in, DeviceBuffer& out) {
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
}  // namespace ps::kernels::cuda
