#include "client/tensor_compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps::client_internal {

namespace {

// An element's order key: its magnitude's bits, which as an unsigned
// integer order as the magnitudes do (NaN above infinity, so a NaN is sent
// rather than kept in the residual for ever).
uint32_t MagnitudeKey(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits & 0x7fffffff;
}

// At most this many keys, evenly spaced, estimate the threshold.
constexpr size_t kSampleSize = 8192;

// A key that at least k of `sum`'s keys reach, most likely: the sample's
// ((k / n) x sample + 3 standard deviations)-th largest, so that about k
// plus a few percent pass. 0 when the sample cannot say.
uint32_t EstimateThreshold(absl::Span<const float> sum, size_t k) {
  const size_t n = sum.size();
  const size_t s = std::min(n, kSampleSize);
  std::vector<uint32_t> sample(s);
  for (size_t j = 0; j < s; ++j) sample[j] = MagnitudeKey(sum[j * n / s]);
  const double expected = std::ceil(static_cast<double>(k) * s / n);
  const size_t rank =
      static_cast<size_t>(expected + 3 * std::sqrt(expected) + 3);
  if (rank >= s) return 0;
  std::nth_element(sample.begin(), sample.begin() + rank, sample.end(),
                   std::greater<uint32_t>());
  return sample[rank];
}

// The indices of the k largest keys of `sum` (ties to the lower index) if
// at least k keys reach `threshold`; else nothing.
std::vector<uint32_t> SelectAtOrAbove(absl::Span<const float> sum, size_t k,
                                      uint32_t threshold) {
  // Above the threshold: all candidates, ordered later. At it: in index
  // order, so ties need no sort; more than k are never needed.
  std::vector<uint32_t> above, at;
  above.reserve(k + k / 4);
  const size_t n = sum.size();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = MagnitudeKey(sum[i]);
    if (key > threshold) {
      above.push_back(static_cast<uint32_t>(i));
    } else if (key == threshold && at.size() < k) {
      at.push_back(static_cast<uint32_t>(i));
    }
  }
  if (above.size() >= k) {
    // A strict order on (key, index): the chosen set is unique.
    std::nth_element(above.begin(), above.begin() + k, above.end(),
                     [&sum](uint32_t a, uint32_t b) {
                       const uint32_t ka = MagnitudeKey(sum[a]);
                       const uint32_t kb = MagnitudeKey(sum[b]);
                       return ka > kb || (ka == kb && a < b);
                     });
    above.resize(k);
    return above;
  }
  if (above.size() + at.size() < k) return {};
  at.resize(k - above.size());
  above.insert(above.end(), at.begin(), at.end());
  return above;
}

}  // namespace

absl::Status ValidateCompression(const Compression& c, absl::string_view what) {
  if (c.kind == Compression::Kind::kTopK &&
      !(c.topk_ratio > 0 && c.topk_ratio <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": topk_ratio must be in (0, 1], got ", c.topk_ratio));
  }
  return absl::OkStatus();
}

WireEncoding PushEncoding(const Compression& c) {
  switch (c.kind) {
    case Compression::Kind::kBfloat16:
      return WireEncoding::kBfloat16;
    case Compression::Kind::kFloat16:
      return WireEncoding::kFloat16;
    case Compression::Kind::kTopK:
      return WireEncoding::kTopK;
    case Compression::Kind::kNone:
      break;
  }
  return WireEncoding::kFloat32;
}

WireEncoding PullEncoding(const Compression& c) {
  const WireEncoding push = PushEncoding(c);
  return push == WireEncoding::kTopK ? WireEncoding::kFloat32 : push;
}

std::vector<float> SparsifyTopK(absl::Span<const float> gradient, double ratio,
                                std::vector<float>* residual) {
  const size_t n = gradient.size();
  // gradient + residual, summed in place: the residual is what is left.
  std::vector<float>& sum = *residual;
  if (sum.size() == n) {
    for (size_t i = 0; i < n; ++i) sum[i] += gradient[i];
  } else {
    sum.assign(gradient.begin(), gradient.end());
  }
  std::vector<float> sent(n, 0.0f);
  if (n > 0) {
    const size_t k = std::min<size_t>(
        n, std::max<size_t>(1, static_cast<size_t>(std::ceil(ratio * n))));
    std::vector<uint32_t> chosen =
        SelectAtOrAbove(sum, k, EstimateThreshold(sum, k));
    // The sample overestimated: every key reaches 0.
    if (chosen.empty()) chosen = SelectAtOrAbove(sum, k, 0);
    for (uint32_t i : chosen) {
      sent[i] = sum[i];
      sum[i] = 0.0f;
    }
  }
  return sent;
}

TensorCompression::TensorCompression(const ModelSpec* model,
                                     const Compression& job_default)
    : model_(*model),
      choices_(model->tensors.size(), job_default),
      residuals_(model->tensors.size()) {}

absl::Status TensorCompression::Set(int id, const Compression& compression) {
  if (id < 0 || static_cast<size_t>(id) >= model_.tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("SetCompression: no tensor ",
                                                   id, " in a model of ",
                                                   model_.tensors.size()));
  }
  if (absl::Status s = ValidateCompression(
          compression,
          absl::StrCat("SetCompression(", model_.tensors[id].name, ")"));
      !s.ok()) {
    return s;
  }
  absl::MutexLock lock(&mu_);
  choices_[id] = compression;
  if (compression.kind != Compression::Kind::kTopK) residuals_[id].clear();
  return absl::OkStatus();
}

std::vector<Compression> TensorCompression::Choices() const {
  absl::MutexLock lock(&mu_);
  return choices_;
}

std::vector<float> TensorCompression::Sparsify(
    int id, absl::Span<const float> gradient, double ratio,
    std::vector<float>* residual) const {
  {
    absl::MutexLock lock(&mu_);
    *residual = residuals_[id];
  }
  return SparsifyTopK(gradient, ratio, residual);
}

void TensorCompression::Commit(int id, std::vector<float> residual) {
  absl::MutexLock lock(&mu_);
  if (choices_[id].kind != Compression::Kind::kTopK) return;
  residuals_[id] = std::move(residual);
}

}  // namespace ps::client_internal
