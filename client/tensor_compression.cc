#include "client/tensor_compression.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps::client_internal {

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
  std::vector<float> sum(gradient.begin(), gradient.end());
  if (residual->size() == n) {
    for (size_t i = 0; i < n; ++i) sum[i] += (*residual)[i];
  }
  const size_t k = std::min<size_t>(
      n, std::max<size_t>(1, static_cast<size_t>(std::ceil(ratio * n))));
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  // A strict order on (magnitude, index): the chosen set is unique.
  auto larger = [&sum](uint32_t a, uint32_t b) {
    const float ma = std::fabs(sum[a]), mb = std::fabs(sum[b]);
    return ma > mb || (ma == mb && a < b);
  };
  if (k < n)
    std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
  std::vector<float> sent(n, 0.0f);
  for (size_t j = 0; j < k && n > 0; ++j) {
    sent[order[j]] = sum[order[j]];
    sum[order[j]] = 0.0f;
  }
  *residual = std::move(sum);
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
