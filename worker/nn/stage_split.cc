#include "worker/nn/stage_split.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps::worker::nn {
namespace {

struct LayerCost {
  int64_t bytes = 0;
  int64_t flops = 0;
  int tensors = 0;
};

bool Trainable(const LayerConfig& layer) {
  return layer.kind == LayerKind::kConv || layer.kind == LayerKind::kDense;
}

std::vector<LayerCost> CostsOf(const ModelDescription& description) {
  std::vector<LayerCost> costs;
  ActivationShape in = description.input();
  for (size_t i = 0; i < description.layers().size(); ++i) {
    const LayerConfig& layer = description.layers()[i];
    LayerCost cost;
    if (layer.kind == LayerKind::kConv) {
      cost.bytes = (int64_t{layer.units} * in.channels * layer.kernel_height *
                        layer.kernel_width +
                    layer.units) *
                   int64_t{sizeof(float)};
      cost.tensors = 2;
    } else if (layer.kind == LayerKind::kDense) {
      cost.bytes =
          (in.size() * layer.units + layer.units) * int64_t{sizeof(float)};
      cost.tensors = 2;
    }
    cost.flops = LayerFlops(description, static_cast<int>(i));
    costs.push_back(cost);
    in = description.output_shapes()[i];
  }
  return costs;
}

// What a split costs, compared lexicographically.
struct Cost {
  int64_t max_load = std::numeric_limits<int64_t>::max();
  int64_t sent = std::numeric_limits<int64_t>::max();
  bool operator<(const Cost& o) const {
    return std::pair(max_load, sent) < std::pair(o.max_load, o.sent);
  }
};

// The split of `description` into `stages` that minimises the largest
// stage's sum of `load` over its layers, then the floats sent.
absl::StatusOr<std::vector<StageRange>> Split(
    const ModelDescription& description, int stages, bool by_flops) {
  const int n = static_cast<int>(description.layers().size());
  if (stages < 1 || stages > n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--pipeline_stages=%d: must be in [1, %d], the number of layers of "
        "--model (%s); each stage holds at least one layer",
        stages, n, description.ToString()));
  }
  const std::vector<LayerCost> costs = CostsOf(description);
  std::vector<int64_t> bytes(n + 1, 0), flops(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    bytes[i + 1] = bytes[i] + costs[i].bytes;
    flops[i + 1] = flops[i] + costs[i].flops;
  }
  const std::vector<int64_t>& prefix = by_flops ? flops : bytes;
  auto output_size = [&](int end_layer) {
    return description.output_shapes()[end_layer - 1].size();
  };
  // best[s][e]: the best split of layers [0, e) into s stages; cut[s][e]
  // where its last stage starts.
  std::vector<std::vector<Cost>> best(stages + 1, std::vector<Cost>(n + 1));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = Cost{0, 0};
  for (int s = 1; s <= stages; ++s) {
    for (int e = s; e <= n; ++e) {
      for (int b = s - 1; b < e; ++b) {
        const Cost& before = best[s - 1][b];
        if (before.max_load == std::numeric_limits<int64_t>::max()) continue;
        Cost c;
        c.max_load = std::max(before.max_load, prefix[e] - prefix[b]);
        c.sent = before.sent + (b > 0 ? output_size(b) : 0);
        if (c < best[s][e]) {
          best[s][e] = c;
          cut[s][e] = b;
        }
      }
    }
  }
  std::vector<StageRange> ranges(stages);
  int end = n;
  for (int s = stages; s >= 1; --s) {
    ranges[s - 1].first_layer = cut[s][end];
    ranges[s - 1].end_layer = end;
    end = cut[s][end];
  }
  int tensor = 0;
  for (StageRange& r : ranges) {
    r.first_tensor = tensor;
    for (int l = r.first_layer; l < r.end_layer; ++l) {
      tensor += costs[l].tensors;
    }
    r.end_tensor = tensor;
    r.parameter_bytes = bytes[r.end_layer] - bytes[r.first_layer];
    r.flops = flops[r.end_layer] - flops[r.first_layer];
    r.output_size = output_size(r.end_layer);
  }
  return ranges;
}

}  // namespace

std::string StageRange::ToString(const ModelDescription& description) const {
  return absl::StrFormat(
      "layers %d-%d (%s .. %s), %d bytes of parameters, %.3g MFLOP per "
      "example",
      first_layer, end_layer - 1, description.layers()[first_layer].text,
      description.layers()[end_layer - 1].text, parameter_bytes, flops / 1e6);
}

absl::StatusOr<std::vector<StageRange>> SplitByParameterBytes(
    const ModelDescription& description, int stages) {
  return Split(description, stages, /*by_flops=*/false);
}

absl::StatusOr<std::vector<StageRange>> SplitByCompute(
    const ModelDescription& description, int stages) {
  return Split(description, stages, /*by_flops=*/true);
}

absl::StatusOr<std::vector<StageRange>> SplitStages(
    const ModelDescription& description, int stages, StageSplitKind kind) {
  return Split(description, stages, kind == StageSplitKind::kCompute);
}

const char* StageSplitName(StageSplitKind kind) {
  return kind == StageSplitKind::kBytes ? "bytes" : "compute";
}

absl::StatusOr<StageSplitKind> ParseStageSplit(absl::string_view name) {
  for (StageSplitKind kind :
       {StageSplitKind::kBytes, StageSplitKind::kCompute}) {
    if (name == StageSplitName(kind)) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--stage_split=", name, ": must be bytes or compute"));
}

int64_t LayerFlops(const ModelDescription& description, int layer) {
  const LayerConfig& config = description.layers()[layer];
  const ActivationShape in =
      layer == 0 ? description.input() : description.output_shapes()[layer - 1];
  const ActivationShape out = description.output_shapes()[layer];
  bool trainable_below = false;
  for (int l = 0; l < layer; ++l) {
    trainable_below = trainable_below || Trainable(description.layers()[l]);
  }
  switch (config.kind) {
    case LayerKind::kConv:
    case LayerKind::kDense: {
      const int64_t per_output =
          config.kind == LayerKind::kConv
              ? in.channels * config.kernel_height * config.kernel_width
              : in.size();
      const int64_t forward = 2 * out.size() * per_output;
      return forward * (trainable_below ? 3 : 2);
    }
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool:
      return 2 * out.size() * config.kernel_height * config.kernel_width;
    case LayerKind::kRelu:
    case LayerKind::kDropout:
      return 2 * out.size();
    case LayerKind::kFlatten:
      return 0;
  }
  return 0;
}

}  // namespace ps::worker::nn
