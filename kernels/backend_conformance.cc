#include "kernels/backend_conformance.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend_testing.h"
#include "kernels/reference_ops.h"

namespace ps::kernels {

using ::ps::kernels::testing::AllNear;
using ::ps::kernels::testing::Download;
using ::ps::kernels::testing::Upload;

void PrintTo(const BackendParam& param, std::ostream* os) { *os << param.name; }

std::string BackendParamName(
    const ::testing::TestParamInfo<BackendParam>& info) {
  std::string name = info.param.name;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

void BackendConformanceTest::SetUp() {
  absl::StatusOr<std::unique_ptr<Backend>> backend = GetParam().create();
  if (absl::IsUnavailable(backend.status())) {
    GTEST_SKIP() << "backend " << GetParam().name
                 << " unavailable here: " << backend.status();
  }
  ASSERT_TRUE(backend.ok()) << backend.status();
  backend_ = std::move(*backend);
}

namespace {

struct Shape {
  int rows;
  int cols;
};

// Awkward sizes: single elements, sizes below and just above a power of two.
constexpr Shape kShapes[] = {{1, 1}, {1, 3}, {3, 257}, {257, 3}, {257, 10}};

// Labels that are valid class indices, spread over all classes.
std::vector<float> RandomLabels(int rows, int cols, uint64_t seed) {
  std::vector<float> labels = reference::RandomUniform(rows, seed, 0, cols);
  for (float& l : labels) l = std::min<float>(std::floor(l), cols - 1);
  return labels;
}

TEST_P(BackendConformanceTest, GemmMatchesReferenceForEveryTransposeAndShape) {
  struct GemmShape {
    int m, n, k;
  };
  // The last is large enough for OpenBLAS to split it between threads.
  constexpr GemmShape kGemmShapes[] = {
      {1, 1, 1},    {1, 3, 257},   {3, 257, 1},   {257, 1, 3},
      {17, 33, 65}, {257, 3, 257}, {257, 257, 65}};
  constexpr std::pair<float, float> kAlphaBeta[] = {{1.0f, 0.0f},
                                                    {0.5f, -2.0f}};
  uint64_t seed = 1;
  for (const GemmShape& s : kGemmShapes) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      for (const auto& [alpha, beta] : kAlphaBeta) {
        const bool trans_a = transposes & 1;
        const bool trans_b = transposes & 2;
        SCOPED_TRACE(absl::StrCat("m=", s.m, " n=", s.n, " k=", s.k,
                                  " trans_a=", trans_a, " trans_b=", trans_b,
                                  " alpha=", alpha, " beta=", beta));
        const std::vector<float> a =
            reference::RandomUniform(size_t{1} * s.m * s.k, seed++);
        const std::vector<float> b =
            reference::RandomUniform(size_t{1} * s.k * s.n, seed++);
        const std::vector<float> c =
            reference::RandomUniform(size_t{1} * s.m * s.n, seed++);
        std::vector<float> want = c;
        reference::Gemm(trans_a, trans_b, s.m, s.n, s.k, alpha, a, b, beta,
                        absl::MakeSpan(want));
        // The size of the terms bounds the rounding error of any order of
        // summation: the same product over absolute values.
        auto abs_of = [](std::vector<float> v) {
          for (float& x : v) x = std::abs(x);
          return v;
        };
        std::vector<float> magnitude = abs_of(c);
        reference::Gemm(trans_a, trans_b, s.m, s.n, s.k, std::abs(alpha),
                        abs_of(a), abs_of(b), std::abs(beta),
                        absl::MakeSpan(magnitude));
        const float scale =
            *std::max_element(magnitude.begin(), magnitude.end());

        PS_ASSERT_OK_AND_ASSIGN(auto da, Upload(*backend_, a));
        PS_ASSERT_OK_AND_ASSIGN(auto db, Upload(*backend_, b));
        PS_ASSERT_OK_AND_ASSIGN(auto dc, Upload(*backend_, c));
        PS_ASSERT_OK(backend_->Gemm(trans_a, trans_b, s.m, s.n, s.k, alpha, *da,
                                    *db, beta, *dc));
        PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got,
                                Download(*backend_, *dc));
        // A k-term float32 sum in any order, alpha, beta and the rounding
        // of `want` itself: k + 3 roundings of the magnitude at most.
        const double tolerance = (s.k + 3) * 0x1p-24 * scale;
        EXPECT_TRUE(AllNear(got, want, tolerance, 0.0));
      }
    }
  }
}

TEST_P(BackendConformanceTest, GemmIgnoresOldOutputWhenBetaIsZero) {
  const int m = 3, n = 5, k = 4;
  const std::vector<float> a = reference::RandomUniform(m * k, 1);
  const std::vector<float> b = reference::RandomUniform(k * n, 2);
  std::vector<float> want(m * n);
  reference::Gemm(false, false, m, n, k, 1.0f, a, b, 0.0f,
                  absl::MakeSpan(want));
  PS_ASSERT_OK_AND_ASSIGN(auto da, Upload(*backend_, a));
  PS_ASSERT_OK_AND_ASSIGN(auto db, Upload(*backend_, b));
  PS_ASSERT_OK_AND_ASSIGN(
      auto dc,
      Upload(*backend_, std::vector<float>(
                            m * n, std::numeric_limits<float>::quiet_NaN())));
  PS_ASSERT_OK(
      backend_->Gemm(false, false, m, n, k, 1.0f, *da, *db, 0.0f, *dc));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dc));
  EXPECT_TRUE(AllNear(got, want, 1e-6, 1e-5));
}

TEST_P(BackendConformanceTest, GemmWithEmptyInnerDimensionScalesOutput) {
  const std::vector<float> c = {1.0f, -2.0f, 3.0f, 4.0f, 5.0f, -6.0f};
  PS_ASSERT_OK_AND_ASSIGN(auto empty, backend_->Allocate(0));
  PS_ASSERT_OK_AND_ASSIGN(auto dc, Upload(*backend_, c));
  PS_ASSERT_OK(
      backend_->Gemm(false, false, 2, 3, 0, 1.0f, *empty, *empty, 0.5f, *dc));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dc));
  EXPECT_TRUE(AllNear(got, {0.5f, -1.0f, 1.5f, 2.0f, 2.5f, -3.0f}, 0, 0));
}

TEST_P(BackendConformanceTest, AddBiasMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(absl::StrCat("rows=", s.rows, " cols=", s.cols));
    const std::vector<float> bias = reference::RandomUniform(s.cols, 1);
    const std::vector<float> y = reference::RandomUniform(s.rows * s.cols, 2);
    std::vector<float> want = y;
    reference::AddBias(s.rows, s.cols, bias, absl::MakeSpan(want));
    PS_ASSERT_OK_AND_ASSIGN(auto dbias, Upload(*backend_, bias));
    PS_ASSERT_OK_AND_ASSIGN(auto dy, Upload(*backend_, y));
    PS_ASSERT_OK(backend_->AddBias(s.rows, s.cols, *dbias, *dy));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dy));
    EXPECT_TRUE(AllNear(got, want, 0, 0));
  }
}

TEST_P(BackendConformanceTest, ReluMatchesReferenceInPlaceAndNot) {
  for (size_t n : {1, 3, 257}) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    std::vector<float> x = reference::RandomUniform(n, n);
    x[0] = 0.0f;
    std::vector<float> want(n);
    reference::Relu(x, absl::MakeSpan(want));
    PS_ASSERT_OK_AND_ASSIGN(auto dx, Upload(*backend_, x));
    PS_ASSERT_OK_AND_ASSIGN(auto dy, backend_->Allocate(n));
    PS_ASSERT_OK(backend_->Relu(n, *dx, *dy));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dy));
    EXPECT_TRUE(AllNear(got, want, 0, 0));
    PS_ASSERT_OK(backend_->Relu(n, *dx, *dx));
    PS_ASSERT_OK_AND_ASSIGN(got, Download(*backend_, *dx));
    EXPECT_TRUE(AllNear(got, want, 0, 0));
  }
}

TEST_P(BackendConformanceTest, ReluGradPassesGradientOnlyWhereActive) {
  for (size_t n : {1, 3, 257}) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    std::vector<float> activation(n);
    reference::Relu(reference::RandomUniform(n, n), absl::MakeSpan(activation));
    const std::vector<float> grad_y = reference::RandomUniform(n, n + 1);
    std::vector<float> want(n);
    reference::ReluGrad(activation, grad_y, absl::MakeSpan(want));
    PS_ASSERT_OK_AND_ASSIGN(auto dact, Upload(*backend_, activation));
    PS_ASSERT_OK_AND_ASSIGN(auto dgy, Upload(*backend_, grad_y));
    PS_ASSERT_OK_AND_ASSIGN(auto dgx, backend_->Allocate(n));
    PS_ASSERT_OK(backend_->ReluGrad(n, *dact, *dgy, *dgx));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dgx));
    EXPECT_TRUE(AllNear(got, want, 0, 0));
    PS_ASSERT_OK(backend_->ReluGrad(n, *dact, *dgy, *dgy));
    PS_ASSERT_OK_AND_ASSIGN(got, Download(*backend_, *dgy));
    EXPECT_TRUE(AllNear(got, want, 0, 0));
  }
}

TEST_P(BackendConformanceTest, SoftmaxCrossEntropyMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(absl::StrCat("rows=", s.rows, " cols=", s.cols));
    const std::vector<float> logits =
        reference::RandomUniform(s.rows * s.cols, s.rows, -5.0f, 5.0f);
    const std::vector<float> labels = RandomLabels(s.rows, s.cols, s.cols);
    std::vector<float> want_grad(s.rows * s.cols);
    const double want_loss = reference::SoftmaxCrossEntropy(
        s.rows, s.cols, logits, labels, absl::MakeSpan(want_grad));
    PS_ASSERT_OK_AND_ASSIGN(auto dlogits, Upload(*backend_, logits));
    PS_ASSERT_OK_AND_ASSIGN(auto dlabels, Upload(*backend_, labels));
    PS_ASSERT_OK_AND_ASSIGN(auto dloss, backend_->Allocate(1));
    PS_ASSERT_OK_AND_ASSIGN(auto dgrad, backend_->Allocate(s.rows * s.cols));
    PS_ASSERT_OK(backend_->SoftmaxCrossEntropy(s.rows, s.cols, *dlogits,
                                               *dlabels, *dloss, *dgrad));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> loss,
                            Download(*backend_, *dloss));
    EXPECT_NEAR(loss[0], want_loss, 1e-6 + 1e-5 * want_loss);
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> grad,
                            Download(*backend_, *dgrad));
    EXPECT_TRUE(AllNear(grad, want_grad, 1e-7 / s.rows, 1e-4));
  }
}

TEST_P(BackendConformanceTest, SoftmaxCrossEntropyStaysFiniteForHugeLogits) {
  // exp() of any of these overflows float without the max subtraction.
  const std::vector<float> logits = {1000.0f, 0.0f,  -1000.0f,
                                     100.0f,  95.0f, 1e30f};
  const std::vector<float> labels = {1.0f, 1.0f};
  std::vector<float> want_grad(6);
  const double want_loss = reference::SoftmaxCrossEntropy(
      2, 3, logits, labels, absl::MakeSpan(want_grad));
  ASSERT_TRUE(std::isfinite(want_loss));
  PS_ASSERT_OK_AND_ASSIGN(auto dlogits, Upload(*backend_, logits));
  PS_ASSERT_OK_AND_ASSIGN(auto dlabels, Upload(*backend_, labels));
  PS_ASSERT_OK_AND_ASSIGN(auto dloss, backend_->Allocate(1));
  PS_ASSERT_OK_AND_ASSIGN(auto dgrad, backend_->Allocate(6));
  PS_ASSERT_OK(
      backend_->SoftmaxCrossEntropy(2, 3, *dlogits, *dlabels, *dloss, *dgrad));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> loss, Download(*backend_, *dloss));
  EXPECT_NEAR(loss[0], want_loss, 1e-5 * want_loss);
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> grad, Download(*backend_, *dgrad));
  EXPECT_TRUE(AllNear(grad, want_grad, 1e-7, 1e-5));
}

TEST_P(BackendConformanceTest, ColumnSumMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(absl::StrCat("rows=", s.rows, " cols=", s.cols));
    const std::vector<float> x = reference::RandomUniform(s.rows * s.cols, 3);
    std::vector<float> want(s.cols);
    reference::ColumnSum(s.rows, s.cols, x, absl::MakeSpan(want));
    PS_ASSERT_OK_AND_ASSIGN(auto dx, Upload(*backend_, x));
    PS_ASSERT_OK_AND_ASSIGN(auto dout, backend_->Allocate(s.cols));
    PS_ASSERT_OK(backend_->ColumnSum(s.rows, s.cols, *dx, *dout));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dout));
    EXPECT_TRUE(AllNear(got, want, 1e-6 * s.rows, 0));
  }
}

TEST_P(BackendConformanceTest, ArgmaxRowsMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(absl::StrCat("rows=", s.rows, " cols=", s.cols));
    const std::vector<float> x = reference::RandomUniform(s.rows * s.cols, 4);
    std::vector<float> want(s.rows);
    reference::ArgmaxRows(s.rows, s.cols, x, absl::MakeSpan(want));
    PS_ASSERT_OK_AND_ASSIGN(auto dx, Upload(*backend_, x));
    PS_ASSERT_OK_AND_ASSIGN(auto dout, backend_->Allocate(s.rows));
    PS_ASSERT_OK(backend_->ArgmaxRows(s.rows, s.cols, *dx, *dout));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dout));
    EXPECT_TRUE(AllNear(got, want, 0, 0));
  }
}

TEST_P(BackendConformanceTest, CopiesRoundTripAtOffsets) {
  PS_ASSERT_OK_AND_ASSIGN(auto buffer,
                          Upload(*backend_, std::vector<float>(10, 0.0f)));
  const float part[] = {1.0f, 2.0f, 3.0f};
  PS_ASSERT_OK(backend_->CopyToDevice(part, 3, *buffer, 7));
  float out[4] = {};
  PS_ASSERT_OK(backend_->CopyToHost(*buffer, 6, 4, out));
  EXPECT_TRUE(AllNear(out, {0.0f, 1.0f, 2.0f, 3.0f}, 0, 0));
  PS_ASSERT_OK(backend_->Synchronize());
}

TEST_P(BackendConformanceTest, RejectsCopiesPastTheEnd) {
  const std::vector<float> original = reference::RandomUniform(10, 5);
  PS_ASSERT_OK_AND_ASSIGN(auto buffer, Upload(*backend_, original));
  const std::vector<float> values(4, 9.0f);
  EXPECT_EQ(backend_->CopyToDevice(values.data(), 4, *buffer, 7).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->CopyToDevice(values.data(), 1, *buffer, 11).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> out(4);
  EXPECT_EQ(backend_->CopyToHost(*buffer, 8, 4, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *buffer));
  EXPECT_TRUE(AllNear(got, original, 0, 0));
}

}  // namespace
}  // namespace ps::kernels
