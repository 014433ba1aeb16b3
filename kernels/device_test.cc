#include "kernels/device.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"

namespace ps::kernels {
namespace {

TEST(CreateBackendTest, CpuIsChosenByName) {
  PS_ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend("cpu"));
  EXPECT_EQ(backend->name(), "cpu");
}

TEST(CreateBackendTest, AutoPicksCudaExactlyWhenADeviceIsFound) {
  PS_ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend("auto"));
  EXPECT_EQ(backend->name(), CudaDeviceCount() > 0 ? "cuda:0" : "cpu");
}

TEST(CreateBackendTest, ExplicitCudaNeverFallsBackToCpu) {
  auto backend = CreateBackend("cuda");
  if (CudaDeviceCount() > 0) {
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->name(), "cuda:0");
  } else {
    EXPECT_EQ(backend.status().code(),
              CudaCompiledIn() ? absl::StatusCode::kFailedPrecondition
                               : absl::StatusCode::kUnimplemented)
        << backend.status();
  }
}

TEST(LocalCudaOrdinalTest, SpreadsAHostsWorkersOverItsDevices) {
  EXPECT_EQ(LocalCudaOrdinal(0, 4), 0);
  EXPECT_EQ(LocalCudaOrdinal(3, 4), 3);
  EXPECT_EQ(LocalCudaOrdinal(5, 4), 1);
  EXPECT_EQ(LocalCudaOrdinal(7, 1), 0);
  // No device, or no known local rank: device 0, which then fails to open
  // naming itself.
  EXPECT_EQ(LocalCudaOrdinal(3, 0), 0);
  EXPECT_EQ(LocalCudaOrdinal(-1, 4), 0);
}

TEST(CreateBackendTest, CudaFollowsTheLocalRank) {
  const int devices = CudaDeviceCount();
  if (devices == 0) GTEST_SKIP() << testing::kNoCudaDevice;
  for (int local_rank : {0, 1, devices + 1}) {
    SCOPED_TRACE(local_rank);
    PS_ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend("cuda", 1, local_rank));
    EXPECT_EQ(backend->name(),
              absl::StrCat("cuda:", LocalCudaOrdinal(local_rank, devices)));
    // An explicit ordinal wins over the local rank.
    PS_ASSERT_OK_AND_ASSIGN(auto first, CreateBackend("cuda:0", 1, local_rank));
    EXPECT_EQ(first->name(), "cuda:0");
  }
}

TEST(CreateBackendTest, RejectsCudaOrdinalWithoutDevice) {
  const absl::Status status = CreateBackend("cuda:4096").status();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST(CreateBackendTest, RejectsUnknownDeviceNames) {
  for (const char* device : {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:+1",
                             "cuda: 1", "cuda:x", "cuda0", "auto "}) {
    SCOPED_TRACE(device);
    const absl::Status status = CreateBackend(device).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("--device"), absl::string_view::npos);
  }
}

TEST(CreateBackendTest, PassesCpuThreadCountThroughItsValidation) {
  EXPECT_EQ(CreateBackend("cpu", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A stand-in for a CUDA device: the CPU backend under the name "cuda:0",
// whose Relu fails with `relu_error` when set (what a GPU without code for
// its architecture reports).
class FakeDevice : public Backend {
 public:
  explicit FakeDevice(absl::Status relu_error)
      : cpu_(*CreateCpuBackend(CpuBackendOptions())),
        relu_error_(std::move(relu_error)) {}

  std::string name() const override { return "cuda:0"; }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t n) override {
    return cpu_->Allocate(n);
  }
  absl::Status CopyToDevice(const float* host, size_t n, DeviceBuffer& dst,
                            size_t offset) override {
    return cpu_->CopyToDevice(host, n, dst, offset);
  }
  absl::Status CopyToHost(const DeviceBuffer& src, size_t offset, size_t n,
                          float* host) override {
    return cpu_->CopyToHost(src, offset, n, host);
  }
  absl::Status Gemm(bool ta, bool tb, int m, int n, int k, float alpha,
                    const DeviceBuffer& a, const DeviceBuffer& b, float beta,
                    DeviceBuffer& c) override {
    return cpu_->Gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  absl::Status AddBias(int rows, int cols, const DeviceBuffer& bias,
                       DeviceBuffer& y) override {
    return cpu_->AddBias(rows, cols, bias, y);
  }
  absl::Status Relu(size_t n, const DeviceBuffer& x, DeviceBuffer& y) override {
    if (!relu_error_.ok()) return relu_error_;
    return cpu_->Relu(n, x, y);
  }
  absl::Status ReluGrad(size_t n, const DeviceBuffer& a, const DeviceBuffer& gy,
                        DeviceBuffer& gx) override {
    return cpu_->ReluGrad(n, a, gy, gx);
  }
  absl::Status SoftmaxCrossEntropy(int rows, int cols,
                                   const DeviceBuffer& logits,
                                   const DeviceBuffer& labels,
                                   DeviceBuffer& loss,
                                   DeviceBuffer& grad) override {
    return cpu_->SoftmaxCrossEntropy(rows, cols, logits, labels, loss, grad);
  }
  absl::Status ColumnSum(int rows, int cols, const DeviceBuffer& x,
                         DeviceBuffer& out) override {
    return cpu_->ColumnSum(rows, cols, x, out);
  }
  absl::Status ArgmaxRows(int rows, int cols, const DeviceBuffer& x,
                          DeviceBuffer& out) override {
    return cpu_->ArgmaxRows(rows, cols, x, out);
  }
  absl::Status Conv2dForward(const Conv2dShape& shape, const DeviceBuffer& x,
                             const DeviceBuffer& w, DeviceBuffer& y) override {
    return cpu_->Conv2dForward(shape, x, w, y);
  }
  absl::Status Conv2dBackwardData(const Conv2dShape& shape,
                                  const DeviceBuffer& gy, const DeviceBuffer& w,
                                  DeviceBuffer& gx) override {
    return cpu_->Conv2dBackwardData(shape, gy, w, gx);
  }
  absl::Status Conv2dBackwardFilter(const Conv2dShape& shape,
                                    const DeviceBuffer& x,
                                    const DeviceBuffer& gy,
                                    DeviceBuffer& gw) override {
    return cpu_->Conv2dBackwardFilter(shape, x, gy, gw);
  }
  absl::Status AddChannelBias(int batch, int channels, int spatial,
                              const DeviceBuffer& bias,
                              DeviceBuffer& y) override {
    return cpu_->AddChannelBias(batch, channels, spatial, bias, y);
  }
  absl::Status ChannelBiasGrad(int batch, int channels, int spatial,
                               const DeviceBuffer& gy,
                               DeviceBuffer& gb) override {
    return cpu_->ChannelBiasGrad(batch, channels, spatial, gy, gb);
  }
  absl::Status MaxPool2dForward(const Pool2dShape& shape, const DeviceBuffer& x,
                                DeviceBuffer& y,
                                DeviceBuffer& argmax) override {
    return cpu_->MaxPool2dForward(shape, x, y, argmax);
  }
  absl::Status MaxPool2dBackward(const Pool2dShape& shape,
                                 const DeviceBuffer& gy,
                                 const DeviceBuffer& argmax,
                                 DeviceBuffer& gx) override {
    return cpu_->MaxPool2dBackward(shape, gy, argmax, gx);
  }
  absl::Status AvgPool2dForward(const Pool2dShape& shape, const DeviceBuffer& x,
                                DeviceBuffer& y) override {
    return cpu_->AvgPool2dForward(shape, x, y);
  }
  absl::Status AvgPool2dBackward(const Pool2dShape& shape,
                                 const DeviceBuffer& gy,
                                 DeviceBuffer& gx) override {
    return cpu_->AvgPool2dBackward(shape, gy, gx);
  }
  absl::Status DropoutForward(size_t n, const DropoutMask& mask,
                              const DeviceBuffer& x, DeviceBuffer& y) override {
    return cpu_->DropoutForward(n, mask, x, y);
  }
  absl::Status DropoutBackward(size_t n, const DropoutMask& mask,
                               const DeviceBuffer& gy,
                               DeviceBuffer& gx) override {
    return cpu_->DropoutBackward(n, mask, gy, gx);
  }
  absl::Status Synchronize() override { return cpu_->Synchronize(); }

 private:
  std::unique_ptr<Backend> cpu_;
  absl::Status relu_error_;
};

std::function<absl::StatusOr<std::unique_ptr<Backend>>()> Device(
    absl::Status relu_error, int* created) {
  return [relu_error, created]() -> absl::StatusOr<std::unique_ptr<Backend>> {
    ++*created;
    return std::make_unique<FakeDevice>(relu_error);
  };
}

TEST(CheckBackendRunsTest, PassesOnTheCpu) {
  PS_ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend("cpu"));
  const absl::Status status = CheckBackendRuns(*backend);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(CreateAutoBackendTest, UsesADeviceThatRunsOurCode) {
  int created = 0;
  PS_ASSERT_OK_AND_ASSIGN(
      auto backend,
      internal::CreateAutoBackend(1, Device(absl::OkStatus(), &created), 1));
  EXPECT_EQ(backend->name(), "cuda:0");
  EXPECT_EQ(created, 1);
}

TEST(CreateAutoBackendTest, FallsBackToTheCpuOnAnUnsupportedArchitecture) {
  int created = 0;
  PS_ASSERT_OK_AND_ASSIGN(
      auto backend,
      internal::CreateAutoBackend(
          1,
          Device(absl::InternalError("relu kernel launch failed: no kernel "
                                     "image is available for execution on "
                                     "the device"),
                 &created),
          1));
  EXPECT_EQ(backend->name(), "cpu");
  EXPECT_EQ(created, 1);
}

TEST(CreateAutoBackendTest, FallsBackToTheCpuWhenTheDeviceCannotStart) {
  PS_ASSERT_OK_AND_ASSIGN(
      auto backend,
      internal::CreateAutoBackend(
          1,
          []() -> absl::StatusOr<std::unique_ptr<Backend>> {
            return absl::ResourceExhaustedError("cudaMalloc: out of memory");
          },
          1));
  EXPECT_EQ(backend->name(), "cpu");
}

TEST(CreateAutoBackendTest, DoesNotTouchCudaWithoutADevice) {
  int created = 0;
  PS_ASSERT_OK_AND_ASSIGN(
      auto backend,
      internal::CreateAutoBackend(0, Device(absl::OkStatus(), &created), 1));
  EXPECT_EQ(backend->name(), "cpu");
  EXPECT_EQ(created, 0);
}

}  // namespace
}  // namespace ps::kernels
