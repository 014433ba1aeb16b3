#include "kernels/cpu_backend.h"

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/backend_conformance.h"
#include "kernels/backend_testing.h"
#include "kernels/reference_ops.h"

namespace ps::kernels {
namespace {

using ::ps::kernels::testing::AllNear;
using ::ps::kernels::testing::Download;
using ::ps::kernels::testing::Upload;

// The shared suite, once with OpenBLAS on one thread and once on two (its
// threaded paths split the matrices differently).
INSTANTIATE_TEST_SUITE_P(
    Cpu, BackendConformanceTest,
    ::testing::Values(BackendParam{"cpu", [] { return CreateCpuBackend(); }},
                      BackendParam{"cpu_two_threads",
                                   [] {
                                     CpuBackendOptions options;
                                     options.num_threads = 2;
                                     return CreateCpuBackend(options);
                                   }}),
    BackendParamName);

class CpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PS_ASSERT_OK_AND_ASSIGN(backend_, CreateCpuBackend());
  }

  std::unique_ptr<Backend> backend_;
};

// A buffer some other backend might hand out: host code must not touch it.
class ForeignBuffer final : public DeviceBuffer {
 public:
  float* data() override { return values_; }
  const float* data() const override { return values_; }
  size_t size() const override { return 4; }

 private:
  float values_[4] = {};
};

TEST_F(CpuBackendTest, IsNamedCpu) { EXPECT_EQ(backend_->name(), "cpu"); }

TEST(CreateCpuBackendTest, RejectsThreadCountsOutOfRange) {
  for (int threads : {-1, 0, 65}) {
    CpuBackendOptions options;
    options.num_threads = threads;
    EXPECT_EQ(CreateCpuBackend(options).status().code(),
              absl::StatusCode::kInvalidArgument)
        << threads;
  }
}

TEST_F(CpuBackendTest, RejectsLabelsThatAreNotClassIndicesWithoutWriting) {
  const std::vector<float> logits = reference::RandomUniform(6, 1);
  for (float bad : {-1.0f, 3.0f, 1.5f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(bad);
    PS_ASSERT_OK_AND_ASSIGN(auto dlogits, Upload(*backend_, logits));
    // Row 0 is fine: nothing may be written for it either.
    PS_ASSERT_OK_AND_ASSIGN(auto dlabels, Upload(*backend_, {0.0f, bad}));
    PS_ASSERT_OK_AND_ASSIGN(auto dloss, Upload(*backend_, {7.0f}));
    PS_ASSERT_OK_AND_ASSIGN(auto dgrad,
                            Upload(*backend_, std::vector<float>(6, 7.0f)));
    const absl::Status status =
        backend_->SoftmaxCrossEntropy(2, 3, *dlogits, *dlabels, *dloss, *dgrad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("row 1"), absl::string_view::npos)
        << status;
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> loss,
                            Download(*backend_, *dloss));
    EXPECT_EQ(loss[0], 7.0f);
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> grad,
                            Download(*backend_, *dgrad));
    EXPECT_TRUE(AllNear(grad, std::vector<float>(6, 7.0f), 0, 0));
  }
}

TEST_F(CpuBackendTest, RejectsBuffersTooSmallForTheShape) {
  PS_ASSERT_OK_AND_ASSIGN(auto six, backend_->Allocate(6));
  PS_ASSERT_OK_AND_ASSIGN(auto five, backend_->Allocate(5));
  PS_ASSERT_OK_AND_ASSIGN(auto other_six, backend_->Allocate(6));
  // 2x3 times 3x2 into 2x2 fits; a 3x2 `b` needs 6 floats, not 5.
  PS_ASSERT_OK(
      backend_->Gemm(false, false, 2, 2, 3, 1, *six, *six, 0, *other_six));
  EXPECT_EQ(backend_->Gemm(false, false, 2, 2, 3, 1, *six, *five, 0, *other_six)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->AddBias(2, 3, *five, *five).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Relu(6, *five, *six).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->ReluGrad(6, *six, *six, *five).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->ColumnSum(2, 3, *five, *six).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->ArgmaxRows(6, 1, *six, *five).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      backend_->Gemm(false, false, -1, 2, 3, 1, *six, *six, 0, *five).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      backend_->SoftmaxCrossEntropy(0, 3, *six, *six, *five, *other_six).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuBackendTest, RejectsBuffersOfAnotherBackend) {
  ForeignBuffer foreign;
  PS_ASSERT_OK_AND_ASSIGN(auto mine, backend_->Allocate(4));
  const float values[4] = {1, 2, 3, 4};
  EXPECT_EQ(backend_->CopyToDevice(values, 4, foreign, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Relu(4, foreign, *mine).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      backend_->Gemm(false, false, 2, 2, 2, 1, *mine, *mine, 0, foreign).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuBackendTest, GemmRejectsOutputAliasingAnInput) {
  PS_ASSERT_OK_AND_ASSIGN(auto a, backend_->Allocate(4));
  PS_ASSERT_OK_AND_ASSIGN(auto b, backend_->Allocate(4));
  EXPECT_EQ(backend_->Gemm(false, false, 2, 2, 2, 1, *a, *b, 0, *a).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Gemm(false, false, 2, 2, 2, 1, *a, *b, 0, *b).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuBackendTest, ArgmaxRowsBreaksTiesTowardTheLowestIndex) {
  PS_ASSERT_OK_AND_ASSIGN(
      auto x, Upload(*backend_, {1.0f, 3.0f, 3.0f, 2.0f, 2.0f, 2.0f}));
  PS_ASSERT_OK_AND_ASSIGN(auto out, backend_->Allocate(2));
  PS_ASSERT_OK(backend_->ArgmaxRows(2, 3, *x, *out));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *out));
  EXPECT_TRUE(AllNear(got, {1.0f, 0.0f}, 0, 0));
}

TEST_F(CpuBackendTest, MaxPool2dBackwardRejectsArgmaxOutsideItsWindow) {
  // A 2x4 plane, two 2x2 windows: output 1 covers columns 2 and 3, i.e.
  // positions 2, 3, 6 and 7.
  Pool2dShape shape;
  shape.batch = 1;
  shape.channels = 1;
  shape.in_height = 2;
  shape.in_width = 4;
  shape.window_height = shape.window_width = 2;
  shape.stride_height = shape.stride_width = 2;
  PS_ASSERT_OK_AND_ASSIGN(auto grad_y, Upload(*backend_, {1.0f, 2.0f}));
  for (float bad :
       {1.0f, 8.0f, -1.0f, 6.5f, std::numeric_limits<float>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    PS_ASSERT_OK_AND_ASSIGN(auto argmax, Upload(*backend_, {0.0f, bad}));
    PS_ASSERT_OK_AND_ASSIGN(auto grad_x,
                            Upload(*backend_, std::vector<float>(8, 7.0f)));
    const absl::Status status =
        backend_->MaxPool2dBackward(shape, *grad_y, *argmax, *grad_x);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("of output 1"), absl::string_view::npos)
        << status;
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got,
                            Download(*backend_, *grad_x));
    EXPECT_TRUE(AllNear(got, std::vector<float>(8, 7.0f), 0, 0));
  }
  PS_ASSERT_OK_AND_ASSIGN(auto argmax, Upload(*backend_, {5.0f, 6.0f}));
  PS_ASSERT_OK_AND_ASSIGN(auto grad_x, backend_->Allocate(8));
  PS_ASSERT_OK(backend_->MaxPool2dBackward(shape, *grad_y, *argmax, *grad_x));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *grad_x));
  EXPECT_TRUE(AllNear(got, {0, 0, 0, 0, 0, 1, 2, 0}, 0, 0));
}

TEST_F(CpuBackendTest, ReluKeepsNaNVisible) {
  PS_ASSERT_OK_AND_ASSIGN(
      auto x,
      Upload(*backend_, {std::numeric_limits<float>::quiet_NaN(), -1.0f}));
  PS_ASSERT_OK(backend_->Relu(2, *x, *x));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *x));
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_EQ(got[1], 0.0f);
}

}  // namespace
}  // namespace ps::kernels
