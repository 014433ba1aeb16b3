#include "kernels/cpu_backend.h"

#include <cblas.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "kernels/cpu_cnn_ops.h"
#include "kernels/cpu_dense_ops.h"
#include "kernels/shape_checks.h"

namespace ps::kernels {
namespace {

constexpr int kMaxThreads = 64;

// Host memory, zero-filled on allocation so results never depend on whatever
// the allocator handed back.
class CpuBuffer final : public DeviceBuffer {
 public:
  CpuBuffer(std::unique_ptr<float[]> data, size_t size)
      : data_(std::move(data)), size_(size) {}

  float* data() override { return data_.get(); }
  const float* data() const override { return data_.get(); }
  size_t size() const override { return size_; }

 private:
  const std::unique_ptr<float[]> data_;
  const size_t size_;
};

// OK if `buffer` came from a CPU backend and holds at least `needed` floats.
// A buffer of another backend may hold device memory the host cannot touch.
absl::Status CheckBuffer(absl::string_view op, absl::string_view arg,
                         const DeviceBuffer& buffer, uint64_t needed) {
  if (dynamic_cast<const CpuBuffer*>(&buffer) == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: buffer `%s` was not allocated by a cpu backend", op, arg));
  }
  return CheckBufferSize(op, arg, buffer, needed);
}

// One buffer argument of an operation and the floats its shape needs.
struct Arg {
  absl::string_view name;
  const DeviceBuffer* buffer;
  uint64_t needed;
};

absl::Status CheckAll(absl::string_view op, std::initializer_list<Arg> args) {
  for (const Arg& arg : args) {
    if (absl::Status s = CheckBuffer(op, arg.name, *arg.buffer, arg.needed);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// CheckAll, then that the last argument (the output) is none of the others.
absl::Status CheckOutput(absl::string_view op,
                         std::initializer_list<Arg> args) {
  if (absl::Status s = CheckAll(op, args); !s.ok()) return s;
  const Arg& out = *(args.end() - 1);
  for (const Arg* in = args.begin(); in != args.end() - 1; ++in) {
    if (absl::Status s =
            CheckNotAliased(op, out.name, *out.buffer, {in->buffer});
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(
      size_t num_elements) override {
    if (num_elements > std::numeric_limits<size_t>::max() / sizeof(float)) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "Allocate: %d floats do not fit in memory", num_elements));
    }
    std::unique_ptr<float[]> data(new (std::nothrow) float[num_elements]());
    if (data == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "Allocate: out of host memory for %d floats", num_elements));
    }
    return std::make_unique<CpuBuffer>(std::move(data), num_elements);
  }

  absl::Status CopyToDevice(const float* host, size_t num_elements,
                            DeviceBuffer& dst, size_t dst_offset) override {
    if (absl::Status s =
            CheckRange("CopyToDevice", host, num_elements, dst, dst_offset);
        !s.ok()) {
      return s;
    }
    if (num_elements > 0) {
      std::memmove(dst.data() + dst_offset, host, num_elements * sizeof(float));
    }
    return absl::OkStatus();
  }

  absl::Status CopyToHost(const DeviceBuffer& src, size_t src_offset,
                          size_t num_elements, float* host) override {
    if (absl::Status s =
            CheckRange("CopyToHost", host, num_elements, src, src_offset);
        !s.ok()) {
      return s;
    }
    if (num_elements > 0) {
      std::memmove(host, src.data() + src_offset, num_elements * sizeof(float));
    }
    return absl::OkStatus();
  }

  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const DeviceBuffer& a, const DeviceBuffer& b,
                    float beta, DeviceBuffer& c) override {
    if (absl::Status s = CheckGemmShape(m, n, k, a, b, c); !s.ok()) return s;
    for (auto [arg, buffer, needed] :
         {std::make_tuple("a", &a, Product(m, k)),
          std::make_tuple("b", &b, Product(k, n)),
          std::make_tuple("c", static_cast<const DeviceBuffer*>(&c),
                          Product(m, n))}) {
      if (absl::Status s = CheckBuffer("Gemm", arg, *buffer, needed); !s.ok()) {
        return s;
      }
    }
    cpu::Gemm(trans_a, trans_b, m, n, k, alpha, a.data(), b.data(), beta,
              c.data());
    return absl::OkStatus();
  }

  absl::Status AddBias(int rows, int cols, const DeviceBuffer& bias,
                       DeviceBuffer& y) override {
    if (absl::Status s = CheckMatrix("AddBias", rows, cols); !s.ok()) return s;
    if (absl::Status s = CheckBuffer("AddBias", "bias", bias, cols); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckBuffer("AddBias", "y", y, Product(rows, cols));
        !s.ok()) {
      return s;
    }
    cpu::AddBias(rows, cols, bias.data(), y.data());
    return absl::OkStatus();
  }

  absl::Status Relu(size_t n, const DeviceBuffer& x, DeviceBuffer& y) override {
    if (absl::Status s = CheckBuffer("Relu", "x", x, n); !s.ok()) return s;
    if (absl::Status s = CheckBuffer("Relu", "y", y, n); !s.ok()) return s;
    cpu::Relu(n, x.data(), y.data());
    return absl::OkStatus();
  }

  absl::Status ReluGrad(size_t n, const DeviceBuffer& activation,
                        const DeviceBuffer& grad_y,
                        DeviceBuffer& grad_x) override {
    for (auto [arg, buffer] :
         {std::make_pair("activation", &activation),
          std::make_pair("grad_y", &grad_y),
          std::make_pair("grad_x",
                         static_cast<const DeviceBuffer*>(&grad_x))}) {
      if (absl::Status s = CheckBuffer("ReluGrad", arg, *buffer, n); !s.ok()) {
        return s;
      }
    }
    cpu::ReluGrad(n, activation.data(), grad_y.data(), grad_x.data());
    return absl::OkStatus();
  }

  absl::Status SoftmaxCrossEntropy(int rows, int cols,
                                   const DeviceBuffer& logits,
                                   const DeviceBuffer& labels,
                                   DeviceBuffer& loss,
                                   DeviceBuffer& grad_logits) override {
    constexpr absl::string_view kOp = "SoftmaxCrossEntropy";
    if (absl::Status s = CheckClassMatrix(kOp, rows, cols); !s.ok()) return s;
    for (auto [arg, buffer, needed] :
         {std::make_tuple("logits", &logits, Product(rows, cols)),
          std::make_tuple("labels", &labels, Product(rows, 1)),
          std::make_tuple("loss", static_cast<const DeviceBuffer*>(&loss),
                          Product(1, 1)),
          std::make_tuple("grad_logits",
                          static_cast<const DeviceBuffer*>(&grad_logits),
                          Product(rows, cols))}) {
      if (absl::Status s = CheckBuffer(kOp, arg, *buffer, needed); !s.ok()) {
        return s;
      }
    }
    return cpu::SoftmaxCrossEntropy(rows, cols, logits.data(), labels.data(),
                                    loss.data(), grad_logits.data());
  }

  absl::Status ColumnSum(int rows, int cols, const DeviceBuffer& x,
                         DeviceBuffer& out) override {
    if (absl::Status s = CheckMatrix("ColumnSum", rows, cols); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckBuffer("ColumnSum", "x", x, Product(rows, cols));
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckBuffer("ColumnSum", "out", out, cols); !s.ok()) {
      return s;
    }
    cpu::ColumnSum(rows, cols, x.data(), out.data(), column_sums_);
    return absl::OkStatus();
  }

  absl::Status ArgmaxRows(int rows, int cols, const DeviceBuffer& x,
                          DeviceBuffer& out) override {
    if (absl::Status s = CheckArgmaxShape(rows, cols); !s.ok()) return s;
    if (absl::Status s = CheckBuffer("ArgmaxRows", "x", x, Product(rows, cols));
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckBuffer("ArgmaxRows", "out", out, rows); !s.ok()) {
      return s;
    }
    cpu::ArgmaxRows(rows, cols, x.data(), out.data());
    return absl::OkStatus();
  }

  absl::Status Conv2dForward(const Conv2dShape& shape, const DeviceBuffer& x,
                             const DeviceBuffer& weights,
                             DeviceBuffer& y) override {
    constexpr absl::string_view kOp = "Conv2dForward";
    if (absl::Status s = CheckConv2dShape(kOp, shape); !s.ok()) return s;
    if (absl::Status s =
            CheckOutput(kOp, {{"x", &x, shape.input_size()},
                              {"weights", &weights, shape.weight_size()},
                              {"y", &y, shape.output_size()}});
        !s.ok()) {
      return s;
    }
    cpu::Conv2dForward(shape, x.data(), weights.data(), y.data(), columns_);
    return absl::OkStatus();
  }

  absl::Status Conv2dBackwardData(const Conv2dShape& shape,
                                  const DeviceBuffer& grad_y,
                                  const DeviceBuffer& weights,
                                  DeviceBuffer& grad_x) override {
    constexpr absl::string_view kOp = "Conv2dBackwardData";
    if (absl::Status s = CheckConv2dShape(kOp, shape); !s.ok()) return s;
    if (absl::Status s =
            CheckOutput(kOp, {{"grad_y", &grad_y, shape.output_size()},
                              {"weights", &weights, shape.weight_size()},
                              {"grad_x", &grad_x, shape.input_size()}});
        !s.ok()) {
      return s;
    }
    cpu::Conv2dBackwardData(shape, grad_y.data(), weights.data(), grad_x.data(),
                            columns_);
    return absl::OkStatus();
  }

  absl::Status Conv2dBackwardFilter(const Conv2dShape& shape,
                                    const DeviceBuffer& x,
                                    const DeviceBuffer& grad_y,
                                    DeviceBuffer& grad_weights) override {
    constexpr absl::string_view kOp = "Conv2dBackwardFilter";
    if (absl::Status s = CheckConv2dShape(kOp, shape); !s.ok()) return s;
    if (absl::Status s = CheckOutput(
            kOp, {{"x", &x, shape.input_size()},
                  {"grad_y", &grad_y, shape.output_size()},
                  {"grad_weights", &grad_weights, shape.weight_size()}});
        !s.ok()) {
      return s;
    }
    cpu::Conv2dBackwardFilter(shape, x.data(), grad_y.data(),
                              grad_weights.data(), columns_);
    return absl::OkStatus();
  }

  absl::Status AddChannelBias(int batch, int channels, int spatial,
                              const DeviceBuffer& bias,
                              DeviceBuffer& y) override {
    constexpr absl::string_view kOp = "AddChannelBias";
    if (absl::Status s = CheckChannelShape(kOp, batch, channels, spatial);
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            CheckOutput(kOp, {{"bias", &bias, Product(1, channels)},
                              {"y", &y, Product(batch, channels) * spatial}});
        !s.ok()) {
      return s;
    }
    cpu::AddChannelBias(batch, channels, spatial, bias.data(), y.data());
    return absl::OkStatus();
  }

  absl::Status ChannelBiasGrad(int batch, int channels, int spatial,
                               const DeviceBuffer& grad_y,
                               DeviceBuffer& grad_bias) override {
    constexpr absl::string_view kOp = "ChannelBiasGrad";
    if (absl::Status s = CheckChannelShape(kOp, batch, channels, spatial);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckOutput(
            kOp, {{"grad_y", &grad_y, Product(batch, channels) * spatial},
                  {"grad_bias", &grad_bias, Product(1, channels)}});
        !s.ok()) {
      return s;
    }
    cpu::ChannelBiasGrad(batch, channels, spatial, grad_y.data(),
                         grad_bias.data());
    return absl::OkStatus();
  }

  absl::Status MaxPool2dForward(const Pool2dShape& shape, const DeviceBuffer& x,
                                DeviceBuffer& y,
                                DeviceBuffer& argmax) override {
    constexpr absl::string_view kOp = "MaxPool2dForward";
    if (absl::Status s = CheckPool2dShape(kOp, shape); !s.ok()) return s;
    // Two outputs: each is checked against everything before it.
    if (absl::Status s =
            CheckOutput(kOp, {{"x", &x, shape.input_size()},
                              {"argmax", &argmax, shape.output_size()},
                              {"y", &y, shape.output_size()}});
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckNotAliased(kOp, "argmax", argmax, {&x});
        !s.ok()) {
      return s;
    }
    cpu::MaxPool2dForward(shape, x.data(), y.data(), argmax.data());
    return absl::OkStatus();
  }

  absl::Status MaxPool2dBackward(const Pool2dShape& shape,
                                 const DeviceBuffer& grad_y,
                                 const DeviceBuffer& argmax,
                                 DeviceBuffer& grad_x) override {
    constexpr absl::string_view kOp = "MaxPool2dBackward";
    if (absl::Status s = CheckPool2dShape(kOp, shape); !s.ok()) return s;
    if (absl::Status s =
            CheckOutput(kOp, {{"grad_y", &grad_y, shape.output_size()},
                              {"argmax", &argmax, shape.output_size()},
                              {"grad_x", &grad_x, shape.input_size()}});
        !s.ok()) {
      return s;
    }
    return cpu::MaxPool2dBackward(shape, grad_y.data(), argmax.data(),
                                  grad_x.data());
  }

  absl::Status AvgPool2dForward(const Pool2dShape& shape, const DeviceBuffer& x,
                                DeviceBuffer& y) override {
    constexpr absl::string_view kOp = "AvgPool2dForward";
    if (absl::Status s = CheckPool2dShape(kOp, shape); !s.ok()) return s;
    if (absl::Status s = CheckOutput(kOp, {{"x", &x, shape.input_size()},
                                           {"y", &y, shape.output_size()}});
        !s.ok()) {
      return s;
    }
    cpu::AvgPool2dForward(shape, x.data(), y.data());
    return absl::OkStatus();
  }

  absl::Status AvgPool2dBackward(const Pool2dShape& shape,
                                 const DeviceBuffer& grad_y,
                                 DeviceBuffer& grad_x) override {
    constexpr absl::string_view kOp = "AvgPool2dBackward";
    if (absl::Status s = CheckPool2dShape(kOp, shape); !s.ok()) return s;
    if (absl::Status s =
            CheckOutput(kOp, {{"grad_y", &grad_y, shape.output_size()},
                              {"grad_x", &grad_x, shape.input_size()}});
        !s.ok()) {
      return s;
    }
    cpu::AvgPool2dBackward(shape, grad_y.data(), grad_x.data());
    return absl::OkStatus();
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

  absl::Status Synchronize() override { return absl::OkStatus(); }

  int64_t ConvScratchBytes(const Conv2dShape& shape) const override {
    return static_cast<int64_t>(shape.im2col_size() * sizeof(float));
  }
  int64_t conv_scratch_bytes() const override {
    return static_cast<int64_t>(columns_.capacity() * sizeof(float));
  }

 private:
  static absl::Status CheckRange(absl::string_view op, const float* host,
                                 size_t num_elements,
                                 const DeviceBuffer& buffer, size_t offset) {
    if (host == nullptr && num_elements > 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: null host pointer", op));
    }
    if (dynamic_cast<const CpuBuffer*>(&buffer) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: buffer was not allocated by a cpu backend", op));
    }
    if (offset > buffer.size() || num_elements > buffer.size() - offset) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %d floats at offset %d do not fit a buffer of %d", op,
          num_elements, offset, buffer.size()));
    }
    return absl::OkStatus();
  }

  struct DropoutNames {
    absl::string_view op, in, out;
  };

  // Both directions apply the same mask; only the names differ.
  static absl::Status Dropout(const DropoutNames& names, size_t n,
                              const DropoutMask& mask, const DeviceBuffer& in,
                              DeviceBuffer& out) {
    if (absl::Status s = CheckDropoutMask(names.op, mask); !s.ok()) return s;
    if (absl::Status s =
            CheckAll(names.op, {{names.in, &in, n}, {names.out, &out, n}});
        !s.ok()) {
      return s;
    }
    cpu::Dropout(n, mask, in.data(), out.data());
    return absl::OkStatus();
  }

  // Scratch reused so steady-state steps do not allocate: ColumnSum's sums,
  // and one image's im2col matrix for the convolutions, grown to the largest
  // layer seen.
  std::vector<double> column_sums_;
  std::vector<float> columns_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(
    const CpuBackendOptions& options) {
  if (options.num_threads < 1 || options.num_threads > kMaxThreads) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cpu backend: num_threads %d is not in [1, %d]",
                        options.num_threads, kMaxThreads));
  }
  openblas_set_num_threads(options.num_threads);
  return std::make_unique<CpuBackend>();
}

}  // namespace ps::kernels
