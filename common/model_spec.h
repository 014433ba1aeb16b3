#ifndef PS_COMMON_MODEL_SPEC_H_
#define PS_COMMON_MODEL_SPEC_H_

// A model's declaration: the tensors a training program asks the parameter
// servers to hold. Rank 0 declares; the servers build their partition from
// it, and every other rank's declaration must equal it.

#include <cstdint>
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

  int64_t num_elements() const;
};

// The ordered list of a model's tensors. A tensor's id is its index here.
struct ModelSpec {
  std::vector<TensorSpec> tensors;
  // Seeds the server-side initializers.
  uint64_t seed = 1;

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
// float32, stddev < 0, fans < 1).
absl::Status ValidateModelSpec(const ModelSpec& model,
                               const DeclarationLimits& limits);

// OK if `got` declares exactly `expected`; otherwise FailedPrecondition
// naming the first difference, e.g. `tensor 2 "fc1.weight": shape [256,128]
// declared here, [128,256] by rank 0`. `expected_by` and `got_by` name the
// two sides ("rank 0", "the checkpoint", "rank 3").
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
