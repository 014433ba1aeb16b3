#include "worker/nn/model_description.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/backend.h"
#include "kernels/shape_checks.h"
#include "worker/nn/model_description_internal.h"

namespace ps::worker::nn {
namespace {

using internal::Invalid;
using internal::kMaxExtent;

// Per-example activations and each weight tensor stay below 2^31 elements,
// so that kernels may index them with int.
constexpr int64_t kMaxElements = (int64_t{1} << 31) - 1;

// The shape `layer` produces from `in`, or the reason it cannot.
absl::StatusOr<ActivationShape> OutputShape(const LayerConfig& layer,
                                            const ActivationShape& in) {
  ActivationShape out;
  switch (layer.kind) {
    case LayerKind::kConv: {
      const int64_t padded_h = in.height + 2 * int64_t{layer.pad_height};
      const int64_t padded_w = in.width + 2 * int64_t{layer.pad_width};
      if (layer.kernel_height > padded_h || layer.kernel_width > padded_w) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "the %dx%d kernel is larger than its %dx%d input padded by %dx%d",
            layer.kernel_height, layer.kernel_width, in.height, in.width,
            layer.pad_height, layer.pad_width));
      }
      const kernels::Conv2dShape s = ConvShape(layer, in, /*batch=*/1);
      if (absl::Status st = kernels::CheckConv2dShape("conv", s); !st.ok()) {
        return st;
      }
      if (s.weight_size() > static_cast<uint64_t>(kMaxElements)) {
        return absl::InvalidArgumentError(
            "the weight would hold 2^31 or more elements");
      }
      out = {layer.units, s.out_height(), s.out_width()};
      break;
    }
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool: {
      if (layer.kernel_height > in.height || layer.kernel_width > in.width) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "the %dx%d window is larger than its %dx%d input",
            layer.kernel_height, layer.kernel_width, in.height, in.width));
      }
      const kernels::Pool2dShape s = PoolShape(layer, in, 1);
      if (absl::Status st = kernels::CheckPool2dShape("pool", s); !st.ok()) {
        return st;
      }
      out = {in.channels, s.out_height(), s.out_width()};
      break;
    }
    case LayerKind::kRelu:
      out = in;
      break;
    case LayerKind::kFlatten:
      out = {in.size(), 1, 1};
      break;
    case LayerKind::kDense:
      if (!in.flat()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "dense needs a flat input but gets %s; add \"flatten\" before it",
            in.ToString()));
      }
      if (in.channels * layer.units > kMaxElements) {
        return absl::InvalidArgumentError(
            absl::StrFormat("the %dx%d weight would hold 2^31 or more elements",
                            in.channels, layer.units));
      }
      out = {layer.units, 1, 1};
      break;
    case LayerKind::kDropout:
      if (!(layer.rate >= 0.0f && layer.rate < 1.0f)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("rate %g is not in [0, 1)", layer.rate));
      }
      out = in;
      break;
  }
  if (out.size() > kMaxElements) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "its output %s would hold 2^31 or more elements", out.ToString()));
  }
  return out;
}

std::string FormatFloat(float value) {
  for (int precision = 6; precision < 9; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, value);
    float back = 0;
    if (absl::SimpleAtof(text, &back) && back == value) return text;
  }
  return absl::StrFormat("%.9g", value);
}

std::string FormatPair(int a, int b) { return absl::StrCat(a, "x", b); }

std::string FormatLayer(const LayerConfig& layer) {
  switch (layer.kind) {
    case LayerKind::kConv: {
      std::string text =
          absl::StrCat("conv ", layer.units, " ",
                       FormatPair(layer.kernel_height, layer.kernel_width));
      if (layer.stride_height != 1 || layer.stride_width != 1) {
        absl::StrAppend(&text, " stride ",
                        FormatPair(layer.stride_height, layer.stride_width));
      }
      if (layer.pad_height != 0 || layer.pad_width != 0) {
        absl::StrAppend(&text, " pad ",
                        FormatPair(layer.pad_height, layer.pad_width));
      }
      return text;
    }
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool: {
      std::string text = absl::StrCat(
          layer.kind == LayerKind::kMaxPool ? "maxpool " : "avgpool ",
          FormatPair(layer.kernel_height, layer.kernel_width));
      if (layer.stride_height != layer.kernel_height ||
          layer.stride_width != layer.kernel_width) {
        absl::StrAppend(&text, " stride ",
                        FormatPair(layer.stride_height, layer.stride_width));
      }
      return text;
    }
    case LayerKind::kRelu:
      return "relu";
    case LayerKind::kFlatten:
      return "flatten";
    case LayerKind::kDense:
      return absl::StrCat("dense ", layer.units);
    case LayerKind::kDropout:
      return absl::StrCat("dropout ", FormatFloat(layer.rate));
  }
  return "?";
}

// Limits of the numbers a stack built in code may hold (the parser already
// keeps to them).
absl::Status CheckNumbers(const LayerConfig& layer) {
  auto in_range = [](int v, int least) {
    return v >= least && v <= kMaxExtent;
  };
  bool ok = true;
  switch (layer.kind) {
    case LayerKind::kConv:
      ok = in_range(layer.units, 1) && in_range(layer.pad_height, 0) &&
           in_range(layer.pad_width, 0);
      [[fallthrough]];
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool:
      ok = ok && in_range(layer.kernel_height, 1) &&
           in_range(layer.kernel_width, 1) &&
           in_range(layer.stride_height, 1) && in_range(layer.stride_width, 1);
      break;
    case LayerKind::kDense:
      ok = in_range(layer.units, 1);
      break;
    default:
      break;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sizes, channels, kernels and strides must be in [1, %d], padding in "
        "[0, %d]",
        kMaxExtent, kMaxExtent));
  }
  return absl::OkStatus();
}

// Every extent at least 1 and fewer than 2^31 elements in all (checked
// without overflowing).
bool ValidShape(const ActivationShape& shape) {
  int64_t size = 1;
  for (int64_t extent : {shape.channels, shape.height, shape.width}) {
    if (extent < 1 || extent > kMaxElements) return false;
    size *= extent;  // Below 2^62.
    if (size > kMaxElements) return false;
  }
  return true;
}

}  // namespace

kernels::Conv2dShape ConvShape(const LayerConfig& layer,
                               const ActivationShape& input, int batch) {
  kernels::Conv2dShape s;
  s.batch = batch;
  s.in_channels = static_cast<int>(input.channels);
  s.in_height = static_cast<int>(input.height);
  s.in_width = static_cast<int>(input.width);
  s.out_channels = layer.units;
  s.kernel_height = layer.kernel_height;
  s.kernel_width = layer.kernel_width;
  s.stride_height = layer.stride_height;
  s.stride_width = layer.stride_width;
  s.pad_height = layer.pad_height;
  s.pad_width = layer.pad_width;
  return s;
}

kernels::Pool2dShape PoolShape(const LayerConfig& layer,
                               const ActivationShape& input, int batch) {
  kernels::Pool2dShape s;
  s.batch = batch;
  s.channels = static_cast<int>(input.channels);
  s.in_height = static_cast<int>(input.height);
  s.in_width = static_cast<int>(input.width);
  s.window_height = layer.kernel_height;
  s.window_width = layer.kernel_width;
  s.stride_height = layer.stride_height;
  s.stride_width = layer.stride_width;
  return s;
}

absl::StatusOr<ActivationShape> LayerOutputShape(const LayerConfig& layer,
                                                 const ActivationShape& input) {
  if (absl::Status s = CheckNumbers(layer); !s.ok()) return s;
  if (!ValidShape(input)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("input %dx%dx%d is not a shape of at least 1 and "
                        "below 2^31 elements",
                        input.channels, input.height, input.width));
  }
  return OutputShape(layer, input);
}

std::string ActivationShape::ToString() const {
  if (flat()) return absl::StrCat(channels);
  return absl::StrCat(channels, "x", height, "x", width);
}

int ModelDescription::num_classes() const {
  return static_cast<int>(output_shapes_.back().size());
}

absl::StatusOr<ModelDescription> ModelDescription::Build(
    const ActivationShape& input, std::vector<LayerConfig> layers,
    const std::function<absl::Status(int, absl::string_view)>& invalid) {
  for (int64_t extent : {input.channels, input.height, input.width}) {
    if (extent < 1 || extent > kMaxExtent) {
      return invalid(-1, absl::StrFormat("input %dx%dx%d: each extent must be "
                                         "in [1, %d]",
                                         input.channels, input.height,
                                         input.width, kMaxExtent));
    }
  }
  if (input.size() > kMaxElements) {
    return invalid(-1, absl::StrFormat("input %s holds 2^31 or more elements",
                                       input.ToString()));
  }
  ModelDescription d;
  d.input_ = input;
  ActivationShape shape = input;
  bool has_parameters = false;
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerConfig& layer = layers[i];
    if (layer.text.empty()) layer.text = FormatLayer(layer);
    absl::StatusOr<ActivationShape> out = LayerOutputShape(layer, shape);
    if (!out.ok()) return invalid(static_cast<int>(i), out.status().message());
    shape = *out;
    d.output_shapes_.push_back(shape);
    has_parameters = has_parameters || layer.kind == LayerKind::kConv ||
                     layer.kind == LayerKind::kDense;
  }
  if (!has_parameters) {
    return invalid(-1,
                   "the network has no dense or conv layer: nothing to train");
  }
  if (!shape.flat()) {
    return invalid(
        -1, absl::StrFormat("the last layer gives %s per example, not a flat "
                            "vector of class scores; end with \"flatten\" or "
                            "\"dense N\"",
                            shape.ToString()));
  }
  d.layers_ = std::move(layers);
  return d;
}

absl::StatusOr<ModelDescription> ModelDescription::Create(
    const ActivationShape& input, std::vector<LayerConfig> layers,
    absl::string_view where) {
  std::vector<std::string> texts;
  for (const LayerConfig& layer : layers) {
    texts.push_back(layer.text.empty() ? FormatLayer(layer) : layer.text);
  }
  return Build(input, std::move(layers), [&](int i, absl::string_view problem) {
    return Invalid({std::string(where), i < 0 ? "" : absl::StrCat("layer ", i),
                    i < 0 ? "" : texts[i]},
                   problem);
  });
}

ModelSpec ModelDescription::Spec(uint64_t seed) const {
  ModelSpec spec;
  spec.seed = seed;
  int convs = 0, denses = 0;
  ActivationShape in = input_;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerConfig& layer = layers_[i];
    TensorSpec weight, bias;
    if (layer.kind == LayerKind::kConv) {
      const int64_t area = int64_t{layer.kernel_height} * layer.kernel_width;
      weight.name = absl::StrCat("conv", convs, ".weight");
      weight.shape = {layer.units, in.channels, layer.kernel_height,
                      layer.kernel_width};
      weight.initializer = InitializerSpec::GlorotUniform(in.channels * area,
                                                          layer.units * area);
      bias.name = absl::StrCat("conv", convs++, ".bias");
    } else if (layer.kind == LayerKind::kDense) {
      weight.name = absl::StrCat("fc", denses, ".weight");
      weight.shape = {in.size(), layer.units};
      weight.initializer =
          InitializerSpec::GlorotUniform(in.size(), layer.units);
      bias.name = absl::StrCat("fc", denses++, ".bias");
    }
    if (!weight.name.empty()) {
      bias.shape = {layer.units};
      bias.weight_decay = false;
      spec.tensors.push_back(std::move(weight));
      spec.tensors.push_back(std::move(bias));
    }
    in = output_shapes_[i];
  }
  return spec;
}

std::string ModelDescription::ToString() const {
  std::vector<std::string> items = {absl::StrCat("input ", input_.ToString())};
  for (const LayerConfig& layer : layers_) items.push_back(FormatLayer(layer));
  return absl::StrJoin(items, "; ");
}

}  // namespace ps::worker::nn
