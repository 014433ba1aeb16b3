#include "common/partition.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/fingerprint.h"

namespace ps {
namespace {

// A tensor smaller than target / kSmallTensorDivisor is kept whole; the
// imbalance is then at most about one such tensor, i.e. 1 / 16 of the target.
constexpr uint64_t kSmallTensorDivisor = 16;

}  // namespace

absl::StatusOr<Partition> Partition::Create(const ModelSpec& model,
                                            int num_servers) {
  if (num_servers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "number of servers must be at least 1, got ", num_servers));
  }
  if (model.tensors.empty()) {
    return absl::InvalidArgumentError("model has no tensors");
  }
  for (const TensorSpec& t : model.tensors) {
    if (t.num_elements() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name, " has no elements"));
    }
  }

  Partition p;
  p.model_ = model;
  p.num_servers_ = num_servers;
  p.by_server_.resize(num_servers);
  p.by_tensor_.resize(model.tensors.size());

  const uint64_t total = model.total_elements();
  const uint64_t target = (total + num_servers - 1) / num_servers;
  const uint64_t small_limit =
      std::max<uint64_t>(1, target / kSmallTensorDivisor);

  // Small tensors first, largest first, each whole onto the least loaded
  // server (ties: lowest index, so the result is deterministic).
  std::vector<uint32_t> small, large;
  for (uint32_t id = 0; id < model.tensors.size(); ++id) {
    const uint64_t n = model.tensors[id].num_elements();
    (n < small_limit ? small : large).push_back(id);
  }
  std::stable_sort(small.begin(), small.end(), [&](uint32_t a, uint32_t b) {
    return model.tensors[a].num_elements() > model.tensors[b].num_elements();
  });
  std::vector<uint64_t> load(num_servers, 0);
  std::vector<Slice> slices;
  for (uint32_t id : small) {
    const int server = static_cast<int>(
        std::min_element(load.begin(), load.end()) - load.begin());
    const uint64_t n = model.tensors[id].num_elements();
    slices.push_back({id, 0, n, server});
    load[server] += n;
  }

  // Large tensors, end to end in id order, fill each server up to the target;
  // the last server takes whatever remains.
  int server = 0;
  for (uint32_t id : large) {
    const uint64_t n = model.tensors[id].num_elements();
    uint64_t offset = 0;
    while (offset < n) {
      while (server < num_servers - 1 && load[server] >= target) ++server;
      const uint64_t room =
          server == num_servers - 1 ? n - offset : target - load[server];
      const uint64_t take = std::min(room, n - offset);
      slices.push_back({id, offset, take, server});
      load[server] += take;
      offset += take;
    }
  }

  for (const Slice& s : slices) {
    p.by_server_[s.server].push_back(s);
    p.by_tensor_[s.tensor_id].push_back(s);
  }
  auto by_position = [](const Slice& a, const Slice& b) {
    return a.tensor_id != b.tensor_id ? a.tensor_id < b.tensor_id
                                      : a.offset < b.offset;
  };
  for (auto& v : p.by_server_) std::sort(v.begin(), v.end(), by_position);
  for (auto& v : p.by_tensor_) std::sort(v.begin(), v.end(), by_position);

  Fingerprint fp;
  fp.Add(static_cast<uint64_t>(num_servers));
  fp.Add(static_cast<uint64_t>(model.tensors.size()));
  for (const TensorSpec& t : model.tensors) {
    fp.Add(t.name).Add(static_cast<uint64_t>(t.shape.size()));
    for (int64_t d : t.shape) fp.Add(static_cast<uint64_t>(d));
  }
  p.fingerprint_ = fp.value();
  return p;
}

uint64_t Partition::ElementsOnServer(int server) const {
  uint64_t n = 0;
  for (const Slice& s : by_server_[server]) n += s.num_elements;
  return n;
}

}  // namespace ps
