#ifndef PS_COMMON_MODEL_SPEC_H_
#define PS_COMMON_MODEL_SPEC_H_

// A model's declaration: the tensors a training program asks the parameter
// servers to hold. Rank 0 declares; the servers build their partition from
// it, and every other rank's declaration must equal it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

// Element types. Only float32 is stored and sent today; the wire and the
// declaration carry the type so that bf16/fp16 can be added.
enum class DType { kFloat32 = 1 };

absl::string_view DTypeName(DType dtype);

// How the servers set a tensor's values before the first step. Every
// server-side initializer is a function of (model seed, tensor index,
// element index) alone, so the values do not depend on how many servers
// the tensor is split across.
struct InitializerSpec {
  enum class Kind {
    kZeros = 0,
    kConstant = 1,       // Every element `value`.
    kUniform = 2,        // Uniform in [low, high).
    kNormal = 3,         // Normal(mean, stddev).
    kGlorotUniform = 4,  // Uniform in +-sqrt(6 / (fan_in + fan_out)).
    // Rank 0 uploads the values (ParameterClient's initial values); every
    // rank's first pull returns exactly those bits.
    kFromRank0 = 5,
  };
  Kind kind = Kind::kZeros;
  double value = 0;     // kConstant.
  double low = 0;       // kUniform.
  double high = 0;      // kUniform.
  double mean = 0;      // kNormal.
  double stddev = 0;    // kNormal.
  int64_t fan_in = 0;   // kGlorotUniform.
  int64_t fan_out = 0;  // kGlorotUniform.

  static InitializerSpec Zeros() { return {}; }
  static InitializerSpec Constant(double value);
  static InitializerSpec Uniform(double low, double high);
  static InitializerSpec Normal(double mean, double stddev);
  static InitializerSpec GlorotUniform(int64_t fan_in, int64_t fan_out);
  static InitializerSpec FromRank0();

  // Same kind and same values of the parameters that kind uses.
  bool operator==(const InitializerSpec& o) const;
  bool operator!=(const InitializerSpec& o) const { return !(*this == o); }
};

absl::string_view InitializerKindName(InitializerSpec::Kind kind);

// One tensor of a declaration.
struct TensorSpec {
  // Any printable ASCII but whitespace ("fc0.weight", "encoder/layer.1/w").
  std::string name;
  DType dtype = DType::kFloat32;
  // Row-major; empty for a scalar. Every dimension is at least 1.
  std::vector<int64_t> shape;
  InitializerSpec initializer;
  // Whether the servers' --weight_decay applies to this tensor (biases and
  // normalization parameters usually opt out).
  bool weight_decay = true;
  // A buffer (BatchNorm's running statistics), not a parameter: a push
  // carries the tensor's value, and each update sets it to the pushes'
  // value (a sync step's weighted mean over the ranks), with no optimizer.
  bool assigned = false;

  int64_t num_elements() const;
};

// The optimizers the servers implement.
enum class OptimizerKind { kSgd = 1, kAdam = 2 };

// "sgd", "adam".
absl::string_view OptimizerKindName(OptimizerKind kind);

// The servers' optimizer and its hyper-parameters (update/optimizer.h
// applies it); the defaults are the servers' flag defaults. Float32, as the
// servers compute. Every field is validated whichever kind uses it.
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kAdam;
  float learning_rate = 0.001f;
  // SGD: heavy-ball momentum; 0 is plain SGD.
  float momentum = 0.9f;
  // L2 penalty weight_decay * w added to the gradient of the tensors
  // declared with TensorSpec::weight_decay.
  float weight_decay = 0.0f;
  // Adam.
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;

  static OptimizerSpec Sgd(float learning_rate, float momentum = 0,
                           float weight_decay = 0);
  static OptimizerSpec Adam(float learning_rate, float beta1 = 0.9f,
                            float beta2 = 0.999f, float epsilon = 1e-8f,
                            float weight_decay = 0);

  // Same kind and same values of the fields that kind uses.
  bool operator==(const OptimizerSpec& o) const;
  bool operator!=(const OptimizerSpec& o) const { return !(*this == o); }
};

// InvalidArgument naming the first field out of range (learning_rate and
// epsilon finite and > 0; momentum, beta1, beta2 in [0, 1); weight_decay
// finite and >= 0). Fields are named `prefix` + field ("--" for flags).
absl::Status ValidateOptimizerSpec(const OptimizerSpec& spec,
                                   absl::string_view prefix);

// "sgd(learning_rate 0.1, momentum 0.9, weight_decay 0)": the fields the
// kind uses.
std::string DescribeOptimizer(const OptimizerSpec& spec);

// The ordered list of a model's tensors. A tensor's id is its index here.
struct ModelSpec {
  std::vector<TensorSpec> tensors;
  // Seeds the server-side initializers.
  uint64_t seed = 1;
  // The optimizer the servers build for this model; unset: their flags'.
  std::optional<OptimizerSpec> optimizer;

  int64_t total_elements() const;
  // Index of the tensor called `name`, or -1.
  int FindTensor(absl::string_view name) const;
};

// What servers (and clients, before they send) accept in a declaration.
struct DeclarationLimits {
  int max_tensors = 100000;
  int max_name_bytes = 256;
  int max_rank = 8;
  // Bytes of float32 weights in all; the servers' --max_model_bytes.
  uint64_t max_model_bytes = uint64_t{16} << 30;
};

// InvalidArgument naming the first problem: no tensors, too many, an empty,
// too long, non-printable or repeated name, an unsupported dtype, a
// dimension below 1, too high a rank, too many bytes, or an initializer
// whose parameters are not finite or make no sense (low >= high as
// float32, stddev < 0, fans < 1), or an optimizer out of range
// (ValidateOptimizerSpec).
absl::Status ValidateModelSpec(const ModelSpec& model,
                               const DeclarationLimits& limits);

// OK if `got` declares exactly `expected`; otherwise FailedPrecondition
// naming the first difference, e.g. `tensor 2 "fc1.weight": shape [256,128]
// declared here, [128,256] by rank 0`. `expected_by` and `got_by` name the
// two sides ("rank 0", "the checkpoint", "rank 3"). The optimizer is
// compared too: `optimizer: sgd(...) declared here, adam(...) by rank 0`.
absl::Status CompareModelSpecs(const ModelSpec& expected,
                               absl::string_view expected_by,
                               const ModelSpec& got, absl::string_view got_by);

// "[3,5,7]", "[]" for a scalar.
std::string FormatShape(absl::Span<const int64_t> shape);

// Parses "784-256-128-10" into {784, 256, 128, 10}: at least an input and an
// output layer, each size in [1, 1 << 20].
absl::StatusOr<std::vector<int>> ParseLayerSizes(absl::string_view text);

// A fully connected network: for each layer l, a weight "fc<l>.weight" of
// shape [sizes[l], sizes[l + 1]] (input-major, so y = x * W), Glorot-uniform,
// and a bias "fc<l>.bias" of shape [sizes[l + 1]], zeros and without weight
// decay.
ModelSpec MlpModelSpec(absl::Span<const int> layer_sizes, uint64_t seed = 1);

}  // namespace ps

#endif  // PS_COMMON_MODEL_SPEC_H_
