#ifndef PS_UPDATE_OPTIMIZER_H_
#define PS_UPDATE_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/model_spec.h"
#include "common/tensor_codec.h"
#include "update/range_pool.h"

namespace ps::update {

// Parses "sgd" or "adam".
absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name);

// Hyper-parameters of the server-side optimizer: the declared ones
// (ModelSpec::optimizer), or else the flags of the same names.
using OptimizerConfig = ::ps::OptimizerSpec;

// InvalidArgument naming the flag when a value is out of range.
absl::Status ValidateOptimizerConfig(const OptimizerConfig& config);

// Which of the optimizer flags a server's command line gave.
struct OptimizerFlagsGiven {
  bool optimizer = false;
  bool learning_rate = false;
  bool momentum = false;
  bool weight_decay = false;
  bool beta1 = false;
  bool beta2 = false;
  bool epsilon = false;
};

// The optimizer a shard runs: `declared` (by `declared_by`, e.g. "rank 0")
// when the declaration carries one, else `flags`. A flag given explicitly
// that says otherwise than the declaration, for a field the declared kind
// uses, is FailedPrecondition naming the flag and both values: the servers
// never silently run another optimizer than the one a program declares.
absl::StatusOr<OptimizerConfig> ResolveOptimizer(
    const OptimizerConfig& flags, const OptimizerFlagsGiven& given,
    const std::optional<OptimizerSpec>& declared,
    absl::string_view declared_by);

// One named state vector of an optimizer, as long as the weights it updates.
struct OptimizerStateVector {
  std::string name;
  absl::Span<float> values;
};

// Where an update reads its gradient: returns elements [begin, begin + n)
// for some n in [1, scratch.size() / 4], read where they lie (in the bytes a
// push arrived in) or written into `scratch` (at most
// Optimizer::kGradientBlock elements' worth, on the updating thread's stack).
// With a pool it is called from several threads at once, for disjoint
// ranges.
using GradientReader =
    absl::FunctionRef<EncodedFloats(uint64_t begin, absl::Span<char> scratch)>;

// Updates one contiguous span of weights from gradients, keeping per-element
// state (momentum, Adam moments) sized to that span. One optimizer per
// parameter-server slice, so a slice's update depends on nothing else.
//
// Not thread-safe: the owner (ShardStore) serializes calls with the slice's
// lock (one Apply may still use a pool's threads inside). The state is exposed
// for checkpoints: read it to save, write it (and set_update_count) to restore.
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // w <- update(w, gradient) with the configured learning rate. Both spans
  // must have num_elements() elements; otherwise InvalidArgument and nothing
  // changes. An element whose update would make its weight or state NaN or
  // infinite keeps them as they were (the update then counts in
  // incomplete_updates()): no update makes a weight non-finite.
  absl::Status Apply(absl::Span<const float> gradient,
                     absl::Span<float> weights);
  // The same with `learning_rate` (a schedule's value for this update) in
  // place of the configured one; it must be finite and >= 0. With a `pool`,
  // the elements are updated in ranges on its threads: every state is
  // per element and the update count is taken once, so the result is the
  // same bits as on one thread.
  absl::Status Apply(absl::Span<const float> gradient,
                     absl::Span<float> weights, float learning_rate,
                     RangePool* pool = nullptr);
  // The same with the num_elements() gradient values read a run at a time
  // from `gradient`: gradients kept as received (SliceGradient) are read by
  // the update where they lie, and never copied into a buffer as large as
  // the slice.
  absl::Status Apply(GradientReader gradient, absl::Span<float> weights,
                     float learning_rate, RangePool* pool = nullptr);

  // The most elements a GradientReader is asked for at once: 16 KiB of
  // floats, which stay in the core's L1 cache when a reader computes them
  // (a sync step's sum).
  static constexpr size_t kGradientBlock = 4096;

  // The configured learning rate.
  float learning_rate() const { return learning_rate_; }

  size_t num_elements() const { return num_elements_; }
  // Updates applied so far (Adam's bias correction uses it).
  uint64_t update_count() const { return update_count_; }
  // Updates so far that kept some elements as they were because their
  // result would not have been finite.
  uint64_t incomplete_updates() const { return incomplete_updates_; }
  void set_update_count(uint64_t count) { update_count_ = count; }

  // The state vectors ("momentum" for SGD with momentum; "m" and "v" for
  // Adam; none for plain SGD). The spans stay valid for the optimizer's life.
  virtual std::vector<OptimizerStateVector> state() = 0;

 protected:
  Optimizer(size_t num_elements, float learning_rate)
      : num_elements_(num_elements), learning_rate_(learning_rate) {}

  // Updates elements [begin, begin + weights.size()) of the slice, given
  // their gradients and weights, except those whose result would not be
  // finite; returns whether it kept any so. Called with sizes checked and
  // update_count() already incremented, maybe concurrently for disjoint
  // ranges (so it writes only its range's state).
  virtual bool Update(EncodedFloats gradient, absl::Span<float> weights,
                      float learning_rate, size_t begin) = 0;

 private:
  const size_t num_elements_;
  const float learning_rate_;
  uint64_t update_count_ = 0;
  uint64_t incomplete_updates_ = 0;
};

// An optimizer for `num_elements` weights; fails if the config is invalid.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerConfig& config, size_t num_elements);

// The update of a TensorSpec::assigned tensor (a buffer): Apply sets the
// weights to the "gradient" (the pushed values), ignoring the learning rate;
// non-finite values are kept out as by every optimizer. No state.
std::unique_ptr<Optimizer> CreateAssignment(size_t num_elements);

}  // namespace ps::update

#endif  // PS_UPDATE_OPTIMIZER_H_
