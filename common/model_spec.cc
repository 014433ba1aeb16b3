#include "common/model_spec.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/peer_text.h"

namespace ps {
namespace {

absl::Status InvalidTensor(int id, const TensorSpec& t,
                           absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("tensor ", id, " \"", PeerText(t.name), "\": ", problem));
}

bool Finite(double x) { return std::isfinite(x); }

absl::Status ValidateInitializer(const InitializerSpec& init) {
  using Kind = InitializerSpec::Kind;
  switch (init.kind) {
    case Kind::kZeros:
    case Kind::kFromRank0:
      return absl::OkStatus();
    case Kind::kConstant:
      if (!Finite(init.value) ||
          std::abs(init.value) > std::numeric_limits<float>::max()) {
        return absl::InvalidArgumentError(
            absl::StrCat("constant initializer value ", init.value,
                         " is not a finite "
                         "float"));
      }
      return absl::OkStatus();
    case Kind::kUniform:
      // Compared as the float32 weights will be: a range no float lies in
      // (both ends round to the same one) would yield values below `low`.
      if (!Finite(init.low) || !Finite(init.high) ||
          std::abs(init.low) > std::numeric_limits<float>::max() ||
          std::abs(init.high) > std::numeric_limits<float>::max() ||
          !(static_cast<float>(init.low) < static_cast<float>(init.high))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "uniform initializer needs finite low < high (as float32), got [",
            init.low, ", ", init.high, ")"));
      }
      return absl::OkStatus();
    case Kind::kNormal:
      if (!Finite(init.mean) || !Finite(init.stddev) || init.stddev < 0 ||
          std::abs(init.mean) > 1e30 || init.stddev > 1e30) {
        return absl::InvalidArgumentError(absl::StrCat(
            "normal initializer needs a finite mean and a finite stddev >= 0, "
            "got mean ",
            init.mean, " stddev ", init.stddev));
      }
      return absl::OkStatus();
    case Kind::kGlorotUniform:
      if (init.fan_in < 1 || init.fan_out < 1 ||
          init.fan_in > (int64_t{1} << 40) ||
          init.fan_out > (int64_t{1} << 40)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "glorot_uniform initializer needs fan_in and fan_out in [1, 2^40], "
            "got ",
            init.fan_in, " and ", init.fan_out));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown initializer kind ", static_cast<int>(init.kind)));
}

std::string DescribeInitializer(const InitializerSpec& init) {
  using Kind = InitializerSpec::Kind;
  const absl::string_view name = InitializerKindName(init.kind);
  switch (init.kind) {
    case Kind::kConstant:
      return absl::StrCat(name, "(", init.value, ")");
    case Kind::kUniform:
      return absl::StrCat(name, "(", init.low, ", ", init.high, ")");
    case Kind::kNormal:
      return absl::StrCat(name, "(", init.mean, ", ", init.stddev, ")");
    case Kind::kGlorotUniform:
      return absl::StrCat(name, "(fan_in ", init.fan_in, ", fan_out ",
                          init.fan_out, ")");
    default:
      return std::string(name);
  }
}

// Checks lo <= value < hi (or lo < value when !lo_inclusive; hi may be
// infinite) and finiteness.
absl::Status CheckRange(absl::string_view prefix, absl::string_view field,
                        float value, float lo, bool lo_inclusive, float hi) {
  const bool above = lo_inclusive ? value >= lo : value > lo;
  if (std::isfinite(value) && above && value < hi) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      prefix, field, " must be in ", lo_inclusive ? "[" : "(", lo, ", ",
      std::isinf(hi) ? "inf" : absl::StrCat(hi), "), got ", value));
}

}  // namespace

absl::string_view OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdam:
      return "adam";
  }
  return "unknown";
}

OptimizerSpec OptimizerSpec::Sgd(float learning_rate, float momentum,
                                 float weight_decay) {
  OptimizerSpec s;
  s.kind = OptimizerKind::kSgd;
  s.learning_rate = learning_rate;
  s.momentum = momentum;
  s.weight_decay = weight_decay;
  return s;
}

OptimizerSpec OptimizerSpec::Adam(float learning_rate, float beta1, float beta2,
                                  float epsilon, float weight_decay) {
  OptimizerSpec s;
  s.kind = OptimizerKind::kAdam;
  s.learning_rate = learning_rate;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.epsilon = epsilon;
  s.weight_decay = weight_decay;
  return s;
}

bool OptimizerSpec::operator==(const OptimizerSpec& o) const {
  if (kind != o.kind || learning_rate != o.learning_rate ||
      weight_decay != o.weight_decay) {
    return false;
  }
  if (kind == OptimizerKind::kSgd) return momentum == o.momentum;
  return beta1 == o.beta1 && beta2 == o.beta2 && epsilon == o.epsilon;
}

absl::Status ValidateOptimizerSpec(const OptimizerSpec& spec,
                                   absl::string_view prefix) {
  if (spec.kind != OptimizerKind::kSgd && spec.kind != OptimizerKind::kAdam) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "optimizer kind ", static_cast<int>(spec.kind),
                     " is not one the servers implement (sgd, adam)"));
  }
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const absl::Status checks[] = {
      CheckRange(prefix, "learning_rate", spec.learning_rate, 0, false, kInf),
      CheckRange(prefix, "momentum", spec.momentum, 0, true, 1),
      CheckRange(prefix, "weight_decay", spec.weight_decay, 0, true, kInf),
      CheckRange(prefix, "beta1", spec.beta1, 0, true, 1),
      CheckRange(prefix, "beta2", spec.beta2, 0, true, 1),
      CheckRange(prefix, "epsilon", spec.epsilon, 0, false, kInf),
  };
  for (const absl::Status& s : checks) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string DescribeOptimizer(const OptimizerSpec& spec) {
  const std::string common =
      absl::StrCat(OptimizerKindName(spec.kind), "(learning_rate ",
                   spec.learning_rate, ", weight_decay ", spec.weight_decay);
  if (spec.kind == OptimizerKind::kSgd) {
    return absl::StrCat(common, ", momentum ", spec.momentum, ")");
  }
  return absl::StrCat(common, ", beta1 ", spec.beta1, ", beta2 ", spec.beta2,
                      ", epsilon ", spec.epsilon, ")");
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
  }
  return "unknown";
}

InitializerSpec InitializerSpec::Constant(double value) {
  InitializerSpec s;
  s.kind = Kind::kConstant;
  s.value = value;
  return s;
}

InitializerSpec InitializerSpec::Uniform(double low, double high) {
  InitializerSpec s;
  s.kind = Kind::kUniform;
  s.low = low;
  s.high = high;
  return s;
}

InitializerSpec InitializerSpec::Normal(double mean, double stddev) {
  InitializerSpec s;
  s.kind = Kind::kNormal;
  s.mean = mean;
  s.stddev = stddev;
  return s;
}

InitializerSpec InitializerSpec::GlorotUniform(int64_t fan_in,
                                               int64_t fan_out) {
  InitializerSpec s;
  s.kind = Kind::kGlorotUniform;
  s.fan_in = fan_in;
  s.fan_out = fan_out;
  return s;
}

InitializerSpec InitializerSpec::FromRank0() {
  InitializerSpec s;
  s.kind = Kind::kFromRank0;
  return s;
}

bool InitializerSpec::operator==(const InitializerSpec& o) const {
  // The parameters the kind uses, alone: the others mean nothing, and a
  // declaration from the network may hold any value there, NaN included,
  // which would make a declaration differ from itself.
  if (kind != o.kind) return false;
  switch (kind) {
    case Kind::kZeros:
    case Kind::kFromRank0:
      return true;
    case Kind::kConstant:
      return value == o.value;
    case Kind::kUniform:
      return low == o.low && high == o.high;
    case Kind::kNormal:
      return mean == o.mean && stddev == o.stddev;
    case Kind::kGlorotUniform:
      return fan_in == o.fan_in && fan_out == o.fan_out;
  }
  return value == o.value && low == o.low && high == o.high && mean == o.mean &&
         stddev == o.stddev && fan_in == o.fan_in && fan_out == o.fan_out;
}

absl::string_view InitializerKindName(InitializerSpec::Kind kind) {
  using Kind = InitializerSpec::Kind;
  switch (kind) {
    case Kind::kZeros:
      return "zeros";
    case Kind::kConstant:
      return "constant";
    case Kind::kUniform:
      return "uniform";
    case Kind::kNormal:
      return "normal";
    case Kind::kGlorotUniform:
      return "glorot_uniform";
    case Kind::kFromRank0:
      return "from_rank0";
  }
  return "unknown";
}

int64_t TensorSpec::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ModelSpec::total_elements() const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors) n += t.num_elements();
  return n;
}

int ModelSpec::FindTensor(absl::string_view name) const {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

absl::Status ValidateModelSpec(const ModelSpec& model,
                               const DeclarationLimits& limits) {
  if (model.tensors.empty()) {
    return absl::InvalidArgumentError("the declaration has no tensors");
  }
  if (model.tensors.size() > static_cast<size_t>(limits.max_tensors)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the declaration has ", model.tensors.size(),
                     " tensors; the limit is ", limits.max_tensors));
  }
  absl::flat_hash_set<absl::string_view> names;
  // Bytes summed in a type that cannot overflow: every tensor is below
  // the limit, itself far below 2^63.
  uint64_t total_bytes = 0;
  for (size_t i = 0; i < model.tensors.size(); ++i) {
    const int id = static_cast<int>(i);
    const TensorSpec& t = model.tensors[i];
    if (t.name.empty()) return InvalidTensor(id, t, "the name is empty");
    if (t.name.size() > static_cast<size_t>(limits.max_name_bytes)) {
      return InvalidTensor(
          id, t,
          absl::StrCat("the name has ", t.name.size(), " bytes; the limit is ",
                       limits.max_name_bytes));
    }
    for (char c : t.name) {
      if (c <= ' ' || c > '~') {
        return InvalidTensor(
            id, t,
            absl::StrCat("the name holds the byte 0x",
                         absl::Hex(static_cast<unsigned char>(c)),
                         "; names are printable ASCII without spaces"));
      }
    }
    if (!names.insert(t.name).second) {
      return InvalidTensor(id, t, "the name is declared twice");
    }
    if (t.dtype != DType::kFloat32) {
      return InvalidTensor(id, t,
                           absl::StrCat("dtype ", static_cast<int>(t.dtype),
                                        " is not supported; only float32 is"));
    }
    if (t.shape.size() > static_cast<size_t>(limits.max_rank)) {
      return InvalidTensor(
          id, t,
          absl::StrCat("rank ", t.shape.size(), " is above the limit of ",
                       limits.max_rank));
    }
    uint64_t bytes = sizeof(float);
    for (int64_t d : t.shape) {
      if (d < 1) {
        return InvalidTensor(id, t,
                             absl::StrCat("shape ", FormatShape(t.shape),
                                          " has a dimension below 1"));
      }
      // Checked before multiplying, so the product cannot overflow.
      if (static_cast<uint64_t>(d) > limits.max_model_bytes / bytes) {
        return InvalidTensor(
            id, t,
            absl::StrCat("shape ", FormatShape(t.shape), " is larger than ",
                         "the servers' limit of ", limits.max_model_bytes,
                         " bytes (--max_model_bytes)"));
      }
      bytes *= static_cast<uint64_t>(d);
    }
    total_bytes += bytes;
    if (total_bytes > limits.max_model_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the declaration holds more than the servers' limit of ",
          limits.max_model_bytes, " bytes (--max_model_bytes) by tensor ", id,
          " \"", t.name, "\""));
    }
    if (absl::Status s = ValidateInitializer(t.initializer); !s.ok()) {
      return InvalidTensor(id, t, s.message());
    }
  }
  if (model.optimizer.has_value()) {
    return ValidateOptimizerSpec(*model.optimizer, "the declared optimizer's ");
  }
  return absl::OkStatus();
}

absl::Status CompareModelSpecs(const ModelSpec& expected,
                               absl::string_view expected_by,
                               const ModelSpec& got, absl::string_view got_by) {
  auto differs = [&](absl::string_view what, absl::string_view mine,
                     absl::string_view theirs) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": ", mine, " declared by ", got_by, ", ", theirs,
                     " by ", expected_by));
  };
  const size_t common = std::min(expected.tensors.size(), got.tensors.size());
  for (size_t i = 0; i < common; ++i) {
    const TensorSpec& e = expected.tensors[i];
    const TensorSpec& g = got.tensors[i];
    const std::string what = absl::StrCat("tensor ", i, " \"", e.name, "\"");
    if (e.name != g.name) {
      return differs(absl::StrCat("tensor ", i),
                     absl::StrCat("\"", g.name, "\""),
                     absl::StrCat("\"", e.name, "\""));
    }
    if (e.dtype != g.dtype) {
      return differs(absl::StrCat(what, " dtype"), DTypeName(g.dtype),
                     DTypeName(e.dtype));
    }
    if (e.shape != g.shape) {
      return differs(absl::StrCat(what, " shape"), FormatShape(g.shape),
                     FormatShape(e.shape));
    }
    if (e.initializer != g.initializer) {
      return differs(absl::StrCat(what, " initializer"),
                     DescribeInitializer(g.initializer),
                     DescribeInitializer(e.initializer));
    }
    if (e.weight_decay != g.weight_decay) {
      return differs(absl::StrCat(what, " weight decay"),
                     g.weight_decay ? "on" : "off",
                     e.weight_decay ? "on" : "off");
    }
    if (e.assigned != g.assigned) {
      return differs(absl::StrCat(what, " assignment"),
                     g.assigned ? "assigned (a buffer)" : "optimized",
                     e.assigned ? "assigned (a buffer)" : "optimized");
    }
  }
  if (expected.tensors.size() != got.tensors.size()) {
    const bool got_more = got.tensors.size() > expected.tensors.size();
    const TensorSpec& extra =
        got_more ? got.tensors[common] : expected.tensors[common];
    return absl::FailedPreconditionError(absl::StrCat(
        got_by, " declares ", got.tensors.size(), " tensors, ", expected_by,
        " ", expected.tensors.size(), ": tensor ", common, " \"", extra.name,
        "\" is declared only by ", got_more ? got_by : expected_by));
  }
  if (expected.seed != got.seed) {
    return differs("initializer seed", absl::StrCat(got.seed),
                   absl::StrCat(expected.seed));
  }
  if (expected.optimizer != got.optimizer) {
    auto describe = [](const std::optional<OptimizerSpec>& o) {
      return o.has_value() ? DescribeOptimizer(*o)
                           : std::string("none (the servers' flags)");
    };
    return differs("optimizer", describe(got.optimizer),
                   describe(expected.optimizer));
  }
  return absl::OkStatus();
}

std::string FormatShape(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::StatusOr<std::vector<int>> ParseLayerSizes(absl::string_view text) {
  constexpr int kMaxLayerSize = 1 << 20;
  std::vector<int> sizes;
  for (absl::string_view part : absl::StrSplit(text, '-')) {
    int size = 0;
    if (!absl::SimpleAtoi(part, &size) || size < 1 || size > kMaxLayerSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer sizes \"", text, "\": \"", part,
                       "\" is not a whole number in [1, ", kMaxLayerSize,
                       "]; expected e.g. 784-256-128-10"));
    }
    sizes.push_back(size);
  }
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer sizes \"", text,
                     "\": need at least an input and an output layer, e.g. "
                     "784-256-128-10"));
  }
  return sizes;
}

ModelSpec MlpModelSpec(absl::Span<const int> layer_sizes, uint64_t seed) {
  ModelSpec model;
  model.seed = seed;
  for (size_t l = 0; l + 1 < layer_sizes.size(); ++l) {
    const int64_t in = layer_sizes[l];
    const int64_t out = layer_sizes[l + 1];
    TensorSpec weight;
    weight.name = absl::StrCat("fc", l, ".weight");
    weight.shape = {in, out};
    weight.initializer = InitializerSpec::GlorotUniform(in, out);
    model.tensors.push_back(std::move(weight));
    TensorSpec bias;
    bias.name = absl::StrCat("fc", l, ".bias");
    bias.shape = {out};
    bias.weight_decay = false;
    model.tensors.push_back(std::move(bias));
  }
  return model;
}

}  // namespace ps
