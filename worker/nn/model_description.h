#ifndef PS_WORKER_NN_MODEL_DESCRIPTION_H_
#define PS_WORKER_NN_MODEL_DESCRIPTION_H_

// A network as a stack of layers, written as text (a `--model` flag, or a
// file), checked and shaped before anything is built from it.
//
// The format: items separated by ';' or newlines; '#' starts a comment that
// runs to the end of the line; blank items are skipped. Keywords are lower
// case, numbers are decimal. The first item is the input, every other item a
// layer applied to the previous one's output:
//
//   input C[xHxW]      examples of C x H x W floats, NCHW (`input 784` is a
//                      flat vector: 784x1x1)
//   conv N KHxKW [stride S|SHxSW] [pad P|PHxPW]
//                      2-D convolution to N channels (`conv N K` for a square
//                      kernel), plus a bias per channel; stride 1, pad 0
//   maxpool K|KHxKW [stride S|SHxSW]
//   avgpool K|KHxKW [stride S|SHxSW]
//                      pooling over windows inside the image (no padding);
//                      the stride defaults to the window
//   relu               max(x, 0)
//   flatten            C x H x W -> (C*H*W) x 1 x 1, no computation
//   dense N            fully connected to N outputs (y = x W + b); needs a
//                      flat input, so `flatten` first after images
//   dropout R          zeroes each element with probability R in [0, 1)
//                      while training, scaling the rest by 1 / (1 - R)
//   softmax            optional, last only: names the loss, which is always
//                      softmax cross-entropy over the last layer's outputs
//
// The last layer's output must be flat: its size is the number of classes.
// Instead of a stack, a description may be a preset name or MLP layer sizes:
//
//   mlp                784-256-128-10
//   cnn                input 1x28x28; conv 32 3x3 pad 1; relu; maxpool 2;
//                      conv 64 3x3 pad 1; relu; maxpool 2; flatten;
//                      dense 128; relu; dropout 0.25; dense 10
//   A-B-...-Z          input A; dense B; relu; ...; dense Z (no ReLU after
//                      the last): exactly the tensors MlpModelSpec declares
//
// Parameters are declared in layer order, each layer's weight before its
// bias; dense layers are named fc0, fc1, ... and convolutions conv0, conv1,
// ... (each kind counted on its own):
//   conv<k>.weight [N, C, KH, KW]  GlorotUniform(C*KH*KW, N*KH*KW)
//   conv<k>.bias   [N]             zeros, no weight decay
//   fc<k>.weight   [in, N]         GlorotUniform(in, N)
//   fc<k>.bias     [N]             zeros, no weight decay

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_spec.h"
#include "kernels/backend.h"

namespace ps::worker::nn {

// The shape of one example's activations, channels x height x width. A flat
// vector of n features is n x 1 x 1.
struct ActivationShape {
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;

  int64_t size() const { return channels * height * width; }
  bool flat() const { return height == 1 && width == 1; }
  // "32x28x28", or "784" when flat.
  std::string ToString() const;
  bool operator==(const ActivationShape& o) const {
    return channels == o.channels && height == o.height && width == o.width;
  }
};

enum class LayerKind {
  kConv,
  kMaxPool,
  kAvgPool,
  kRelu,
  kFlatten,
  kDense,
  kDropout,
};

// One layer of a description. Fields a kind does not use stay at their
// defaults.
struct LayerConfig {
  LayerKind kind = LayerKind::kRelu;
  int units = 0;  // kConv: output channels; kDense: outputs.
  // kConv: the kernel; kMaxPool / kAvgPool: the window.
  int kernel_height = 0;
  int kernel_width = 0;
  int stride_height = 1;
  int stride_width = 1;
  int pad_height = 0;  // kConv only.
  int pad_width = 0;
  float rate = 0.0f;  // kDropout.

  // The item as written, for messages ("conv 32 5x5 pad 2").
  std::string text;
};

// A checked layer stack: every layer fits its input, and the output is a
// flat vector of class scores. Immutable once made, hence thread-safe; cheap
// enough to copy.
class ModelDescription {
 public:
  // Parses a description (stack, preset or layer sizes; see above). Errors
  // are InvalidArgument naming the item and its problem, e.g.
  //   model "...": item 4 "conv 64 9x9": the 9x9 kernel is larger than its
  //   7x7 input padded by 0x0
  // (and "line 4" instead of "item 4" when the text has several lines).
  static absl::StatusOr<ModelDescription> Parse(absl::string_view text);

  // A `--model` flag: "@path" reads the description from the file at path
  // (InvalidArgument naming the file if it cannot be read), anything else is
  // parsed as text.
  static absl::StatusOr<ModelDescription> FromFlag(absl::string_view flag);

  // Checks a stack built in code. `where` names it in messages.
  static absl::StatusOr<ModelDescription> Create(
      const ActivationShape& input, std::vector<LayerConfig> layers,
      absl::string_view where = "model");

  const ActivationShape& input() const { return input_; }
  const std::vector<LayerConfig>& layers() const { return layers_; }
  // output_shapes()[i] is what layers()[i] produces.
  const std::vector<ActivationShape>& output_shapes() const {
    return output_shapes_;
  }
  // input().size(): floats per example.
  int64_t example_size() const { return input_.size(); }
  int num_classes() const;

  // The tensors this network asks the servers to hold (see above), with
  // `seed` for the servers' initializers.
  ModelSpec Spec(uint64_t seed = 1) const;

  // One-line canonical text that parses back to the same stack, e.g.
  // "input 784; dense 10".
  std::string ToString() const;

 private:
  ModelDescription() = default;

  // Checks and shapes a stack. `invalid(i, problem)` makes the error for a
  // problem with layers[i], or with the stack as a whole when i is -1.
  static absl::StatusOr<ModelDescription> Build(
      const ActivationShape& input, std::vector<LayerConfig> layers,
      const std::function<absl::Status(int, absl::string_view)>& invalid);
  // Parse, with `source` naming the text in messages.
  static absl::StatusOr<ModelDescription> ParseFrom(absl::string_view text,
                                                    const std::string& source);

  ActivationShape input_;
  std::vector<LayerConfig> layers_;
  std::vector<ActivationShape> output_shapes_;
};

// The shape `layer` produces from `input`, or InvalidArgument saying why it
// cannot (numbers out of range, a kernel or window larger than its input, a
// dense layer on images, ...): the per-layer check of ModelDescription.
absl::StatusOr<ActivationShape> LayerOutputShape(const LayerConfig& layer,
                                                 const ActivationShape& input);

// The convolution a kConv `layer` applies to `batch` examples of `input`
// (unchecked: LayerOutputShape says whether it is valid).
kernels::Conv2dShape ConvShape(const LayerConfig& layer,
                               const ActivationShape& input, int batch);
// The pooling a kMaxPool or kAvgPool `layer` applies, likewise.
kernels::Pool2dShape PoolShape(const LayerConfig& layer,
                               const ActivationShape& input, int batch);

}  // namespace ps::worker::nn

#endif  // PS_WORKER_NN_MODEL_DESCRIPTION_H_
