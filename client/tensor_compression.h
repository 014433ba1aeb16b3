#ifndef PS_CLIENT_TENSOR_COMPRESSION_H_
#define PS_CLIENT_TENSOR_COMPRESSION_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/parameter_client.h"
#include "common/model_spec.h"
#include "common/wire_encoding.h"

namespace ps::client_internal {

// InvalidArgument naming `what` for a topk_ratio outside (0, 1].
absl::Status ValidateCompression(const Compression& compression,
                                 absl::string_view what);

// The encoding a compression gives pushed gradients, and pulled weights.
WireEncoding PushEncoding(const Compression& compression);
WireEncoding PullEncoding(const Compression& compression);

// The k values of gradient + residual that a top-k push sends: exactly the
// ceil(ratio x n) (at least 1) of largest magnitude, ties to the lower
// index, so that the same input always sends the same elements (a NaN
// counts as larger than any number). Returns them in place (the others 0);
// `*residual` becomes what was not sent.
//
// Cost: a pass over the n sums, a threshold from a sample of up to 8192 of
// them that about k (plus a few percent) reach, and an nth_element over
// those only; a second pass when the sample overestimated it.
std::vector<float> SparsifyTopK(absl::Span<const float> gradient, double ratio,
                                std::vector<float>* residual);

// One client's compression of each declared tensor (Compression) and, for
// the kTopK ones, the error-feedback residual: the part of past gradients
// not yet sent.
//
// A push reads the choices once when it starts (Choices), sparsifies with
// Sparsify, and hands the new residual back with Commit once every shard
// took it; a push that failed commits nothing, so the residual is the same
// when its step is tried again.
//
// Thread-safe. Borrows the model, which must outlive it.
class TensorCompression {
 public:
  // Every tensor starts with `job_default` (validated by the caller).
  TensorCompression(const ModelSpec* model, const Compression& job_default);

  // ParameterClient::SetCompression.
  absl::Status Set(int id, const Compression& compression)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Every tensor's choice, by id.
  std::vector<Compression> Choices() const ABSL_LOCKS_EXCLUDED(mu_);

  // SparsifyTopK of `gradient` with tensor `id`'s residual (zeros if none);
  // the residual left goes to `*residual` for Commit.
  std::vector<float> Sparsify(int id, absl::Span<const float> gradient,
                              double ratio, std::vector<float>* residual) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Keeps `residual` as tensor `id`'s, unless the tensor left kTopK since.
  void Commit(int id, std::vector<float> residual) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const ModelSpec& model_;
  mutable absl::Mutex mu_;
  std::vector<Compression> choices_ ABSL_GUARDED_BY(mu_);
  // By id; empty for a tensor with none.
  std::vector<std::vector<float>> residuals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::client_internal

#endif  // PS_CLIENT_TENSOR_COMPRESSION_H_
