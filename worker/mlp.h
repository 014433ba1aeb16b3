#ifndef PS_WORKER_MLP_H_
#define PS_WORKER_MLP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model_spec.h"
#include "kernels/backend.h"

namespace ps::worker {

// The worker's first model, kept (testonly) as the reference nn::Model is
// tested against (worker/nn/model_test.cc): a fully connected classifier
// laid out by MlpModelSpec (tensor 2l is fc<l>.weight [in, out], 2l + 1 is
// fc<l>.bias [out]). Each
// layer computes x W + b, followed by a ReLU except on the last layer, whose
// outputs are logits for a softmax cross-entropy loss averaged over the batch.
//
// It runs on any kernels::Backend and allocates every backend buffer once, in
// Create, for up to `max_batch` examples; steps allocate nothing. Weights
// start at zero until SetWeights. Backward runs from the last layer to the
// first and reports each tensor's gradient as soon as it is final, so the
// caller can push it while earlier layers are still being computed.
//
// Every input is checked before anything is written: a rejected call leaves
// weights and gradients as they were.
//
// Thread safety: none; one thread at a time, like the backend it drives.
// Ownership: borrows the backend, which must outlive the Mlp.
class Mlp {
 public:
  // Called by ForwardBackward once the gradient of `tensor_id` is final, in
  // decreasing tensor id order (fc<L-1>.bias first, fc0.weight last). Runs on
  // the calling thread between backend operations: it may call GetGradient
  // for that tensor, and should hand the values off rather than block.
  using GradientReadyCallback = std::function<void(int tensor_id)>;

  // Fails with InvalidArgument if `spec` is not an MLP layout (at least one
  // layer; shapes chaining in -> out), if max_batch is not in [1, 2^20], or
  // if `backend` is null; with the backend's error if allocation fails.
  static absl::StatusOr<std::unique_ptr<Mlp>> Create(const ModelSpec& spec,
                                                     int max_batch,
                                                     kernels::Backend* backend);

  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;

  const ModelSpec& spec() const { return spec_; }
  int num_tensors() const { return static_cast<int>(spec_.tensors.size()); }
  int input_size() const { return layer_sizes_.front(); }
  int num_classes() const { return layer_sizes_.back(); }
  int max_batch() const { return max_batch_; }

  // Copies `values` into elements [offset, offset + values.size()) of tensor
  // `tensor_id` (a slice, as servers hold them; offset 0 and the whole tensor
  // to set all of it). Rejects an unknown id, a slice past the end, and
  // non-finite values.
  absl::Status SetWeights(int tensor_id, absl::Span<const float> values,
                          int64_t offset = 0);

  // Runs forward and backward on `batch` examples: `images` is batch x
  // input_size() row-major, `labels` holds batch class indices as floats.
  // Returns the mean loss; afterwards GetGradient reads d(loss)/d(tensor).
  // InvalidArgument for a batch outside [1, max_batch()], mismatched sizes, a
  // non-finite pixel or a label that is not a class index; FailedPrecondition
  // (no gradients computed) if the loss is not finite, i.e. training diverged.
  absl::StatusOr<float> ForwardBackward(
      absl::Span<const float> images, absl::Span<const float> labels, int batch,
      const GradientReadyCallback& on_gradient_ready = nullptr);

  // Copies elements [offset, offset + out.size()) of the gradient of tensor
  // `tensor_id` from the last ForwardBackward. FailedPrecondition if that
  // gradient is not computed (yet).
  absl::Status GetGradient(int tensor_id, absl::Span<float> out,
                           int64_t offset = 0);

  // Returns how many of the `n` examples the model classifies correctly,
  // running max_batch() at a time. Does not touch gradients. Same input
  // checks as ForwardBackward, except that n may be any count >= 0.
  absl::StatusOr<int> Evaluate(absl::Span<const float> images,
                               absl::Span<const float> labels, int n);

 private:
  // The buffers of one layer; `output` is after the ReLU (logits on the
  // last layer) and `delta` is d(loss)/d(output before the ReLU).
  struct Layer {
    int in = 0;
    int out = 0;
    std::unique_ptr<kernels::DeviceBuffer> weight;
    std::unique_ptr<kernels::DeviceBuffer> bias;
    std::unique_ptr<kernels::DeviceBuffer> weight_grad;
    std::unique_ptr<kernels::DeviceBuffer> bias_grad;
    std::unique_ptr<kernels::DeviceBuffer> output;
    std::unique_ptr<kernels::DeviceBuffer> delta;
  };

  Mlp(const ModelSpec& spec, std::vector<int> layer_sizes, int max_batch,
      kernels::Backend* backend);

  absl::Status AllocateBuffers();
  absl::Status CheckExamples(absl::Span<const float> images,
                             absl::Span<const float> labels, int n) const;
  absl::Status CheckTensorRange(int tensor_id, int64_t offset,
                                size_t count) const;
  // Uploads `batch` images and runs every layer forward.
  absl::Status Forward(const float* images, int batch);
  absl::Status Backward(int batch,
                        const GradientReadyCallback& on_gradient_ready);
  kernels::DeviceBuffer& LayerInput(int l) {
    return l == 0 ? *input_ : *layers_[l - 1].output;
  }
  kernels::DeviceBuffer& TensorBuffer(int tensor_id, bool gradient);

  // Constant after Create.
  const ModelSpec spec_;
  const std::vector<int> layer_sizes_;
  const int max_batch_;
  kernels::Backend* const backend_;

  std::vector<Layer> layers_;
  std::unique_ptr<kernels::DeviceBuffer> input_;
  std::unique_ptr<kernels::DeviceBuffer> labels_;
  std::unique_ptr<kernels::DeviceBuffer> loss_;
  std::unique_ptr<kernels::DeviceBuffer> predictions_;
  std::vector<float> host_predictions_;
  // Which gradients the last ForwardBackward has finished.
  std::vector<bool> gradient_ready_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_MLP_H_
