// The text form of model descriptions (see model_description.h).

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "common/model_spec.h"
#include "worker/nn/model_description.h"
#include "worker/nn/model_description_internal.h"

namespace ps::worker::nn {
namespace {

using internal::Invalid;
using internal::kMaxExtent;
using internal::Location;

constexpr std::streamsize kMaxFileBytes = 1 << 20;

constexpr absl::string_view kMlpPreset = "784-256-128-10";
constexpr absl::string_view kCnnPreset =
    "input 1x28x28; conv 32 3x3 pad 1; relu; maxpool 2; "
    "conv 64 3x3 pad 1; relu; maxpool 2; flatten; dense 128; relu; "
    "dropout 0.25; dense 10";

// "5" or "5x3" -> {5, 5} or {5, 3}, each in [least, kMaxExtent].
absl::StatusOr<std::pair<int, int>> ParsePair(absl::string_view token,
                                              absl::string_view what,
                                              int least) {
  std::vector<absl::string_view> parts = absl::StrSplit(token, 'x');
  int values[2] = {0, 0};
  bool ok = parts.size() == 1 || parts.size() == 2;
  for (size_t i = 0; ok && i < parts.size(); ++i) {
    ok = absl::SimpleAtoi(parts[i], &values[i]) && values[i] >= least &&
         values[i] <= kMaxExtent &&
         parts[i].find_first_not_of("0123456789") == absl::string_view::npos;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s \"%s\" is not N or HxW with whole numbers in [%d, %d]", what, token,
        least, kMaxExtent));
  }
  if (parts.size() == 1) values[1] = values[0];
  return std::make_pair(values[0], values[1]);
}

absl::StatusOr<int> ParseCount(absl::string_view token,
                               absl::string_view what) {
  int value = 0;
  if (token.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(token, &value) || value < 1 || value > kMaxExtent) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s \"%s\" is not a whole number in [1, %d]", what, token, kMaxExtent));
  }
  return value;
}

// Parses `stride V` and (when `allow_pad`) `pad V` options in any order.
absl::Status ParseOptions(absl::Span<const absl::string_view> tokens,
                          bool allow_pad, LayerConfig& layer) {
  bool seen_stride = false, seen_pad = false;
  for (size_t i = 0; i < tokens.size(); i += 2) {
    const absl::string_view name = tokens[i];
    const bool is_stride = name == "stride";
    const bool is_pad = allow_pad && name == "pad";
    if (!is_stride && !is_pad) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "unknown option \"%s\"; this layer takes %s", name,
          allow_pad ? "\"stride S\" and \"pad P\"" : "\"stride S\""));
    }
    if ((is_stride && seen_stride) || (is_pad && seen_pad)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("option \"%s\" is given twice", name));
    }
    if (i + 1 >= tokens.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("option \"%s\" needs a value", name));
    }
    absl::StatusOr<std::pair<int, int>> value =
        ParsePair(tokens[i + 1], name, is_stride ? 1 : 0);
    if (!value.ok()) return value.status();
    if (is_stride) {
      seen_stride = true;
      std::tie(layer.stride_height, layer.stride_width) = *value;
    } else {
      seen_pad = true;
      std::tie(layer.pad_height, layer.pad_width) = *value;
    }
  }
  return absl::OkStatus();
}

absl::Status ExpectArgs(absl::Span<const absl::string_view> tokens, size_t n,
                        absl::string_view usage) {
  if (tokens.size() != n + 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected \"", usage, "\""));
  }
  return absl::OkStatus();
}

// Parses one layer item (not `input`, not `softmax`).
absl::StatusOr<LayerConfig> ParseLayer(
    absl::Span<const absl::string_view> tokens) {
  LayerConfig layer;
  const absl::string_view kind = tokens[0];
  if (kind == "conv") {
    layer.kind = LayerKind::kConv;
    if (tokens.size() < 3) {
      return absl::InvalidArgumentError(
          "expected \"conv N KHxKW [stride S] [pad P]\"");
    }
    absl::StatusOr<int> units = ParseCount(tokens[1], "output channels");
    if (!units.ok()) return units.status();
    layer.units = *units;
    absl::StatusOr<std::pair<int, int>> kernel =
        ParsePair(tokens[2], "kernel", 1);
    if (!kernel.ok()) return kernel.status();
    std::tie(layer.kernel_height, layer.kernel_width) = *kernel;
    if (absl::Status s = ParseOptions(tokens.subspan(3), true, layer);
        !s.ok()) {
      return s;
    }
    return layer;
  }
  if (kind == "maxpool" || kind == "avgpool") {
    layer.kind = kind == "maxpool" ? LayerKind::kMaxPool : LayerKind::kAvgPool;
    if (tokens.size() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected \"", kind, " KHxKW [stride S]\""));
    }
    absl::StatusOr<std::pair<int, int>> window =
        ParsePair(tokens[1], "window", 1);
    if (!window.ok()) return window.status();
    std::tie(layer.kernel_height, layer.kernel_width) = *window;
    std::tie(layer.stride_height, layer.stride_width) = *window;
    if (absl::Status s = ParseOptions(tokens.subspan(2), false, layer);
        !s.ok()) {
      return s;
    }
    return layer;
  }
  if (kind == "relu" || kind == "flatten") {
    layer.kind = kind == "relu" ? LayerKind::kRelu : LayerKind::kFlatten;
    if (absl::Status s = ExpectArgs(tokens, 0, kind); !s.ok()) return s;
    return layer;
  }
  if (kind == "dense") {
    layer.kind = LayerKind::kDense;
    if (absl::Status s = ExpectArgs(tokens, 1, "dense N"); !s.ok()) return s;
    absl::StatusOr<int> units = ParseCount(tokens[1], "outputs");
    if (!units.ok()) return units.status();
    layer.units = *units;
    return layer;
  }
  if (kind == "dropout") {
    layer.kind = LayerKind::kDropout;
    if (absl::Status s = ExpectArgs(tokens, 1, "dropout RATE"); !s.ok()) {
      return s;
    }
    float rate = 0;
    if (!absl::SimpleAtof(tokens[1], &rate) || !(rate >= 0.0f) ||
        !(rate < 1.0f)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rate \"%s\" is not a number in [0, 1)", tokens[1]));
    }
    layer.rate = rate;
    return layer;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown layer \"%s\"; known: input, conv, maxpool, avgpool, relu, "
      "flatten, dense, dropout, softmax",
      kind));
}

absl::StatusOr<ActivationShape> ParseInput(
    absl::Span<const absl::string_view> tokens) {
  std::vector<absl::string_view> dims;
  if (tokens.size() == 2) dims = absl::StrSplit(tokens[1], 'x');
  if (dims.size() != 1 && dims.size() != 3) {
    return absl::InvalidArgumentError(
        "expected \"input C\" or \"input CxHxW\"");
  }
  int64_t values[3] = {1, 1, 1};
  for (size_t i = 0; i < dims.size(); ++i) {
    absl::StatusOr<int> v = ParseCount(dims[i], "input extent");
    if (!v.ok()) return v.status();
    values[i] = *v;
  }
  return ActivationShape{values[0], values[1], values[2]};
}

bool IsLayerSizes(absl::string_view text) {
  return !text.empty() &&
         text.find_first_not_of("0123456789-") == absl::string_view::npos &&
         text.find_first_of("0123456789") != absl::string_view::npos;
}

std::optional<absl::string_view> Preset(absl::string_view name) {
  if (name == "mlp") return kMlpPreset;
  if (name == "cnn") return kCnnPreset;
  return std::nullopt;
}

absl::StatusOr<ModelDescription> ParseLayerSizesDescription(
    absl::string_view text, const std::string& source) {
  absl::StatusOr<std::vector<int>> sizes = ParseLayerSizes(text);
  if (!sizes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", sizes.status().message()));
  }
  std::vector<LayerConfig> layers;
  for (size_t l = 1; l < sizes->size(); ++l) {
    if (l > 1) {
      LayerConfig relu;
      relu.kind = LayerKind::kRelu;
      layers.push_back(relu);
    }
    LayerConfig dense;
    dense.kind = LayerKind::kDense;
    dense.units = (*sizes)[l];
    layers.push_back(dense);
  }
  return ModelDescription::Create({(*sizes)[0], 1, 1}, std::move(layers),
                                  source);
}

// A stack as written, before it is checked and shaped.
struct ParsedStack {
  ActivationShape input;
  std::vector<LayerConfig> layers;
  std::vector<Location> locations;  // Of each layer.
};

absl::StatusOr<ParsedStack> ParseStack(absl::string_view text,
                                       const std::string& source) {
  struct Item {
    Location at;
    std::vector<absl::string_view> tokens;
  };
  std::vector<Item> items;
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  int lines_with_items = 0;
  for (size_t l = 0; l < lines.size(); ++l) {
    absl::string_view line = lines[l];
    line = line.substr(0, line.find('#'));
    bool counted = false;
    for (absl::string_view part : absl::StrSplit(line, ';')) {
      part = absl::StripAsciiWhitespace(part);
      if (part.empty()) continue;
      if (!counted) ++lines_with_items;
      counted = true;
      Item item;
      item.at = {source, absl::StrCat("line ", l + 1), std::string(part)};
      item.tokens =
          absl::StrSplit(part, absl::ByAnyChar(" \t\r\f\v"), absl::SkipEmpty());
      items.push_back(std::move(item));
    }
  }
  if (items.empty()) {
    return Invalid({source, "", ""}, "the description holds no layers");
  }
  // One line: items are easier to find by their number than by "line 1".
  if (lines_with_items == 1) {
    for (size_t i = 0; i < items.size(); ++i) {
      items[i].at.position = absl::StrCat("item ", i + 1);
    }
  }
  if (items[0].tokens[0] != "input") {
    return Invalid(items[0].at,
                   "a description starts with \"input C\" or \"input CxHxW\", "
                   "or is a preset (mlp, cnn) or layer sizes "
                   "(784-256-128-10)");
  }
  absl::StatusOr<ActivationShape> input = ParseInput(items[0].tokens);
  if (!input.ok()) return Invalid(items[0].at, input.status().message());
  ParsedStack stack;
  stack.input = *input;
  for (size_t i = 1; i < items.size(); ++i) {
    const Item& item = items[i];
    const absl::string_view kind = item.tokens[0];
    if (kind == "input") {
      return Invalid(item.at, "only the first item may be the input");
    }
    if (kind == "softmax") {
      if (i + 1 != items.size()) {
        return Invalid(item.at,
                       "softmax may only be the last item (the loss is always "
                       "softmax cross-entropy over the last layer)");
      }
      if (absl::Status s = ExpectArgs(item.tokens, 0, "softmax"); !s.ok()) {
        return Invalid(item.at, s.message());
      }
      continue;
    }
    absl::StatusOr<LayerConfig> layer = ParseLayer(item.tokens);
    if (!layer.ok()) return Invalid(item.at, layer.status().message());
    layer->text = item.at.text;
    stack.layers.push_back(*std::move(layer));
    stack.locations.push_back(item.at);
  }
  return stack;
}

}  // namespace

absl::StatusOr<ModelDescription> ModelDescription::ParseFrom(
    absl::string_view text, const std::string& source) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  if (std::optional<absl::string_view> preset = Preset(trimmed)) {
    return ParseFrom(*preset, absl::StrCat("model preset \"", trimmed, "\""));
  }
  if (IsLayerSizes(trimmed)) return ParseLayerSizesDescription(trimmed, source);
  absl::StatusOr<ParsedStack> stack = ParseStack(text, source);
  if (!stack.ok()) return stack.status();
  const std::vector<Location>& locations = stack->locations;
  return Build(stack->input, std::move(stack->layers),
               [&](int i, absl::string_view problem) {
                 return Invalid(i < 0 ? Location{source, "", ""} : locations[i],
                                problem);
               });
}

absl::StatusOr<ModelDescription> ModelDescription::Parse(
    absl::string_view text) {
  return ParseFrom(text, "model description");
}

absl::StatusOr<ModelDescription> ModelDescription::FromFlag(
    absl::string_view flag) {
  if (!absl::ConsumePrefix(&flag, "@")) return Parse(flag);
  const std::string path(flag);
  const std::string source = absl::StrCat("model file \"", path, "\"");
  if (path.empty()) {
    return absl::InvalidArgumentError(
        "model description \"@\" names no file; write @path/to/model.txt");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " cannot be opened: ", std::strerror(errno)));
  }
  std::string contents(kMaxFileBytes + 1, '\0');
  in.read(contents.data(), contents.size());
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " cannot be read: ", std::strerror(errno)));
  }
  contents.resize(in.gcount());
  if (contents.size() > static_cast<size_t>(kMaxFileBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is larger than ", kMaxFileBytes,
                     " bytes; is it a model description?"));
  }
  return ParseFrom(contents, source);
}

}  // namespace ps::worker::nn
