#include "kernels/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_conformance.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "kernels/reference_ops.h"

// The CUDA backend against the naive reference (the shared conformance
// suite) and against the CPU backend (a whole training step), plus what is
// CUDA's own: stream ordering of copies against compute, staging buffers,
// deferred label errors. Without a device every test that needs one skips.
namespace ps::kernels {
namespace {

using ::ps::kernels::testing::AllNear;
using ::ps::kernels::testing::AllWithinRounding;
using ::ps::kernels::testing::Download;
using ::ps::kernels::testing::Upload;

using ::ps::kernels::testing::kNoCudaDevice;
using ::ps::kernels::testing::RequireCuda;

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaOrUnavailable() {
  if (CudaDeviceCount() == 0 && !RequireCuda()) {
    return absl::UnavailableError(kNoCudaDevice);
  }
  return CreateCudaBackend(0);
}

// Tolerances there: exact for elementwise ops, channel bias, max pooling and
// dropout (so masks match the CPU's bit for bit); Gemm, convolutions and
// sums within k + 3 float32 roundings of the sum of the absolute terms;
// softmax loss 1e-5 relative, gradient 1e-4 relative; column sums 1e-6 per
// row.
INSTANTIATE_TEST_SUITE_P(Cuda, BackendConformanceTest,
                         ::testing::Values(BackendParam{
                             "cuda", CreateCudaOrUnavailable}),
                         BackendParamName);

TEST(CreateCudaBackendTest, RejectsDevicesThatDoNotExist) {
  for (int ordinal : {-1, CudaDeviceCount()}) {
    SCOPED_TRACE(ordinal);
    const absl::Status status = CreateCudaBackend(ordinal).status();
    EXPECT_EQ(status.code(), CudaCompiledIn()
                                 ? absl::StatusCode::kFailedPrecondition
                                 : absl::StatusCode::kUnimplemented)
        << status;
  }
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0 && !RequireCuda()) GTEST_SKIP() << kNoCudaDevice;
    PS_ASSERT_OK_AND_ASSIGN(cuda_, CreateCudaBackend(0));
    PS_ASSERT_OK_AND_ASSIGN(cpu_, CreateCpuBackend());
  }

  std::unique_ptr<Backend> cuda_;
  std::unique_ptr<Backend> cpu_;
};

TEST_F(CudaBackendTest, IsNamedAfterItsDevice) {
  EXPECT_EQ(cuda_->name(), "cuda:0");
}

// Every tensor of one step of a 3 -> 257 -> 10 MLP on a batch of 257, in
// the order a worker issues it: W2 is uploaded after the first Gemm was
// issued and dW2 downloaded before the rest of the backward pass, so copies
// run while compute is queued. Returns {logits, loss, dW2, db2, dW1, db1}.
absl::StatusOr<std::vector<std::vector<float>>> TrainingStep(Backend& b) {
  constexpr int kBatch = 257, kIn = 3, kHidden = 257, kOut = 10;
  const std::vector<float> x = reference::RandomUniform(kBatch * kIn, 1);
  std::vector<float> labels = reference::RandomUniform(kBatch, 2, 0, kOut);
  for (float& l : labels) l = std::min<float>(std::floor(l), kOut - 1);
  std::vector<std::vector<float>> out;
#define PS_STEP(expr) \
  if (absl::Status s = (expr); !s.ok()) return s
#define PS_STEP_ASSIGN(lhs, expr)               \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = std::move(*lhs##_or)
  PS_STEP_ASSIGN(dx, Upload(b, x));
  PS_STEP_ASSIGN(w1, Upload(b, reference::RandomUniform(kIn * kHidden, 3)));
  PS_STEP_ASSIGN(b1, Upload(b, reference::RandomUniform(kHidden, 4)));
  PS_STEP_ASSIGN(h, b.Allocate(kBatch * kHidden));
  PS_STEP(b.Gemm(false, false, kBatch, kHidden, kIn, 1, *dx, *w1, 0, *h));
  PS_STEP_ASSIGN(w2, Upload(b, reference::RandomUniform(kHidden * kOut, 5)));
  PS_STEP_ASSIGN(b2, Upload(b, reference::RandomUniform(kOut, 6)));
  PS_STEP_ASSIGN(dlabels, Upload(b, labels));
  PS_STEP(b.AddBias(kBatch, kHidden, *b1, *h));
  PS_STEP(b.Relu(kBatch * kHidden, *h, *h));
  PS_STEP_ASSIGN(logits, b.Allocate(kBatch * kOut));
  PS_STEP(b.Gemm(false, false, kBatch, kOut, kHidden, 1, *h, *w2, 0, *logits));
  PS_STEP(b.AddBias(kBatch, kOut, *b2, *logits));
  PS_STEP_ASSIGN(loss, b.Allocate(1));
  PS_STEP_ASSIGN(grad_logits, b.Allocate(kBatch * kOut));
  PS_STEP(b.SoftmaxCrossEntropy(kBatch, kOut, *logits, *dlabels, *loss,
                                *grad_logits));
  PS_STEP_ASSIGN(dw2, b.Allocate(kHidden * kOut));
  PS_STEP(
      b.Gemm(true, false, kHidden, kOut, kBatch, 1, *h, *grad_logits, 0, *dw2));
  PS_STEP_ASSIGN(dw2_host, Download(b, *dw2));
  PS_STEP_ASSIGN(db2, b.Allocate(kOut));
  PS_STEP(b.ColumnSum(kBatch, kOut, *grad_logits, *db2));
  PS_STEP_ASSIGN(dh, b.Allocate(kBatch * kHidden));
  PS_STEP(
      b.Gemm(false, true, kBatch, kHidden, kOut, 1, *grad_logits, *w2, 0, *dh));
  PS_STEP(b.ReluGrad(kBatch * kHidden, *h, *dh, *dh));
  PS_STEP_ASSIGN(dw1, b.Allocate(kIn * kHidden));
  PS_STEP(b.Gemm(true, false, kIn, kHidden, kBatch, 1, *dx, *dh, 0, *dw1));
  PS_STEP_ASSIGN(db1, b.Allocate(kHidden));
  PS_STEP(b.ColumnSum(kBatch, kHidden, *dh, *db1));
  for (const DeviceBuffer* buffer : {logits.get(), loss.get()}) {
    PS_STEP_ASSIGN(values, Download(b, *buffer));
    out.push_back(std::move(values));
  }
  out.push_back(std::move(dw2_host));
  for (const DeviceBuffer* buffer : {db2.get(), dw1.get(), db1.get()}) {
    PS_STEP_ASSIGN(values, Download(b, *buffer));
    out.push_back(std::move(values));
  }
  PS_STEP(b.Synchronize());
#undef PS_STEP
#undef PS_STEP_ASSIGN
  return out;
}

TEST_F(CudaBackendTest, TrainingStepMatchesCpuBackend) {
  PS_ASSERT_OK_AND_ASSIGN(auto want, TrainingStep(*cpu_));
  PS_ASSERT_OK_AND_ASSIGN(auto got, TrainingStep(*cuda_));
  const char* names[] = {"logits", "loss", "dW2", "db2", "dW1", "db1"};
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(names[i]);
    float scale = 0;
    for (float v : want[i]) scale = std::max(scale, std::abs(v));
    // FP32 sums of up to 257 terms in another order: 1e-4 of the largest
    // value of the tensor, or 1e-4 relative.
    EXPECT_TRUE(AllNear(got[i], want[i], 1e-4 * scale, 1e-4));
  }
}

// 8 x 3x3 taps over 300x300 outputs and 4 output channels: 6.8M floats of
// scratch an image, so the 64 MiB scratch holds 2 of the 3 images and each
// pass runs in two chunks (the second one image). Bounds as in the suite.
TEST_F(CudaBackendTest, ConvolutionsInSeveralScratchChunksMatchReference) {
  Conv2dShape s;
  s.batch = 3;
  s.in_channels = 8;
  s.in_height = s.in_width = 300;
  s.out_channels = 4;
  s.kernel_height = s.kernel_width = 3;
  s.pad_height = s.pad_width = 1;
  auto abs_of = [](std::vector<float> v) {
    for (float& x : v) x = std::abs(x);
    return v;
  };
  const std::vector<float> x = reference::RandomUniform(s.input_size(), 1);
  const std::vector<float> w = reference::RandomUniform(s.weight_size(), 2);
  const std::vector<float> grad_y =
      reference::RandomUniform(s.output_size(), 3);
  PS_ASSERT_OK_AND_ASSIGN(auto dx, Upload(*cuda_, x));
  PS_ASSERT_OK_AND_ASSIGN(auto dw, Upload(*cuda_, w));
  PS_ASSERT_OK_AND_ASSIGN(auto dgy, Upload(*cuda_, grad_y));

  std::vector<float> want(s.output_size()), magnitude(s.output_size());
  reference::Conv2dForward(s, x, w, absl::MakeSpan(want));
  reference::Conv2dForward(s, abs_of(x), abs_of(w), absl::MakeSpan(magnitude));
  PS_ASSERT_OK_AND_ASSIGN(auto dy, cuda_->Allocate(s.output_size()));
  PS_ASSERT_OK(cuda_->Conv2dForward(s, *dx, *dw, *dy));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*cuda_, *dy));
  EXPECT_TRUE(AllWithinRounding(got, want, magnitude, 8 * 9 + 3));

  want.assign(s.input_size(), 0.0f);
  magnitude.assign(s.input_size(), 0.0f);
  reference::Conv2dBackwardData(s, grad_y, w, absl::MakeSpan(want));
  reference::Conv2dBackwardData(s, abs_of(grad_y), abs_of(w),
                                absl::MakeSpan(magnitude));
  PS_ASSERT_OK_AND_ASSIGN(auto dgx, cuda_->Allocate(s.input_size()));
  PS_ASSERT_OK(cuda_->Conv2dBackwardData(s, *dgy, *dw, *dgx));
  PS_ASSERT_OK_AND_ASSIGN(got, Download(*cuda_, *dgx));
  EXPECT_TRUE(AllWithinRounding(got, want, magnitude, 4 * 9 + 3));

  want.assign(s.weight_size(), 0.0f);
  magnitude.assign(s.weight_size(), 0.0f);
  reference::Conv2dBackwardFilter(s, x, grad_y, absl::MakeSpan(want));
  reference::Conv2dBackwardFilter(s, abs_of(x), abs_of(grad_y),
                                  absl::MakeSpan(magnitude));
  PS_ASSERT_OK_AND_ASSIGN(auto dgw, cuda_->Allocate(s.weight_size()));
  PS_ASSERT_OK(cuda_->Conv2dBackwardFilter(s, *dx, *dgy, *dgw));
  PS_ASSERT_OK_AND_ASSIGN(got, Download(*cuda_, *dgw));
  EXPECT_TRUE(AllWithinRounding(got, want, magnitude, 3 * 300 * 300 + 3));
}

TEST_F(CudaBackendTest, CopyIntoABufferWaitsForComputeReadingIt) {
  constexpr size_t kN = size_t{1} << 22;  // Long enough to be in flight.
  std::vector<float> first = reference::RandomUniform(kN, 7);
  PS_ASSERT_OK_AND_ASSIGN(auto x, Upload(*cuda_, first));
  PS_ASSERT_OK_AND_ASSIGN(auto y, cuda_->Allocate(kN));
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(round);
    std::vector<float> want(kN);
    reference::Relu(first, absl::MakeSpan(want));
    PS_ASSERT_OK(cuda_->Relu(kN, *x, *y));
    // Overwrites x while Relu may still be reading it.
    const std::vector<float> next = reference::RandomUniform(kN, 8 + round);
    PS_ASSERT_OK(cuda_->CopyToDevice(next.data(), kN, *x, 0));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*cuda_, *y));
    EXPECT_TRUE(AllNear(got, want, 0, 0));
    first = next;
  }
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> last, Download(*cuda_, *x));
  EXPECT_TRUE(AllNear(last, first, 0, 0));
}

TEST_F(CudaBackendTest, UploadsSurviveStagingWrapAndGrowth) {
  // 1 MiB of staging to start: the third upload wraps, the fourth grows it.
  const size_t sizes[] = {1000, 200000, 100000, 3000000, 5};
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<std::vector<float>> values;
  uint64_t seed = 20;
  for (size_t n : sizes) {
    values.push_back(reference::RandomUniform(n, seed++));
    PS_ASSERT_OK_AND_ASSIGN(auto buffer, Upload(*cuda_, values.back()));
    buffers.push_back(std::move(buffer));
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    SCOPED_TRACE(sizes[i]);
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got,
                            Download(*cuda_, *buffers[i]));
    EXPECT_TRUE(AllNear(got, values[i], 0, 0));
  }
}

TEST_F(CudaBackendTest, ReportsBadLabelAtNextSynchronizeOnce) {
  PS_ASSERT_OK_AND_ASSIGN(auto logits,
                          Upload(*cuda_, reference::RandomUniform(6, 1)));
  PS_ASSERT_OK_AND_ASSIGN(auto bad_labels, Upload(*cuda_, {0.0f, 3.0f}));
  PS_ASSERT_OK_AND_ASSIGN(auto loss, cuda_->Allocate(1));
  PS_ASSERT_OK_AND_ASSIGN(auto grad, cuda_->Allocate(6));
  PS_ASSERT_OK(
      cuda_->SoftmaxCrossEntropy(2, 3, *logits, *bad_labels, *loss, *grad));
  const absl::Status status = cuda_->Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("row 1"), absl::string_view::npos) << status;
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*cuda_, *loss));
  EXPECT_TRUE(std::isnan(got[0]));
  PS_ASSERT_OK(cuda_->Synchronize());

  // Good labels afterwards are not blamed for the old ones.
  PS_ASSERT_OK_AND_ASSIGN(auto good_labels, Upload(*cuda_, {0.0f, 2.0f}));
  PS_ASSERT_OK(
      cuda_->SoftmaxCrossEntropy(2, 3, *logits, *good_labels, *loss, *grad));
  PS_ASSERT_OK_AND_ASSIGN(got, Download(*cuda_, *loss));
  EXPECT_TRUE(std::isfinite(got[0]));
  PS_ASSERT_OK(cuda_->Synchronize());
}

TEST_F(CudaBackendTest, RejectsBuffersOfOtherBackends) {
  PS_ASSERT_OK_AND_ASSIGN(auto mine, cuda_->Allocate(4));
  PS_ASSERT_OK_AND_ASSIGN(auto host, cpu_->Allocate(4));
  PS_ASSERT_OK_AND_ASSIGN(auto other_cuda, CreateCudaBackend(0));
  PS_ASSERT_OK_AND_ASSIGN(auto theirs, other_cuda->Allocate(4));
  for (const DeviceBuffer* foreign : {host.get(), theirs.get()}) {
    const float values[4] = {1, 2, 3, 4};
    EXPECT_EQ(
        cuda_->CopyToDevice(values, 4, const_cast<DeviceBuffer&>(*foreign), 0)
            .code(),
        absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(cuda_->Relu(4, *foreign, *mine).code(),
              absl::StatusCode::kInvalidArgument);
  }
  theirs.reset();  // Before its backend.
}

TEST_F(CudaBackendTest, OutOfMemoryNamesCudaMallocAndLeavesBackendUsable) {
  const auto too_big = cuda_->Allocate(size_t{1} << 42);  // 16 TiB.
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("cudaMalloc failed"),
            absl::string_view::npos)
      << too_big.status();
  PS_ASSERT_OK_AND_ASSIGN(auto small, Upload(*cuda_, {1.0f, -1.0f}));
  PS_ASSERT_OK(cuda_->Relu(2, *small, *small));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*cuda_, *small));
  EXPECT_TRUE(AllNear(got, {1.0f, 0.0f}, 0, 0));
}

}  // namespace
}  // namespace ps::kernels
