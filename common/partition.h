#ifndef PS_COMMON_PARTITION_H_
#define PS_COMMON_PARTITION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_spec.h"

namespace ps {

// A contiguous range of one tensor's elements, held by one server.
struct Slice {
  uint32_t tensor_id = 0;
  uint64_t offset = 0;  // In elements, within the tensor.
  uint64_t num_elements = 0;
  int server = 0;
};

// Which server holds which elements of which tensor.
//
// A pure, deterministic function of (model, number of servers): every worker
// and server computes the same one, and its fingerprint lets a server refuse
// a worker that computed another. Small tensors stay whole; large ones are
// split into contiguous ranges so that the bytes per server are balanced.
// Immutable after construction, so safe to share between threads.
class Partition {
 public:
  static absl::StatusOr<Partition> Create(const ModelSpec& model,
                                          int num_servers);

  int num_servers() const { return num_servers_; }
  int num_tensors() const { return static_cast<int>(by_tensor_.size()); }
  const ModelSpec& model() const { return model_; }

  // Slices held by `server`, ordered by (tensor_id, offset).
  const std::vector<Slice>& SlicesOfServer(int server) const {
    return by_server_[server];
  }
  // Slices of `tensor_id`, ordered by offset, covering it exactly once.
  const std::vector<Slice>& SlicesOfTensor(uint32_t tensor_id) const {
    return by_tensor_[tensor_id];
  }
  // Elements held by `server`.
  uint64_t ElementsOnServer(int server) const;

  // Stable across processes and builds (not absl::Hash, which is salted).
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  Partition() = default;

  ModelSpec model_;
  int num_servers_ = 0;
  std::vector<std::vector<Slice>> by_server_;
  std::vector<std::vector<Slice>> by_tensor_;
  uint64_t fingerprint_ = 0;
};

}  // namespace ps

#endif  // PS_COMMON_PARTITION_H_
