#include "update/slice_apply.h"

#include <vector>

namespace ps::update {
namespace {

// Below this many elements an update is applied on the calling thread.
constexpr uint64_t kParallelApplyElements = 1 << 20;

}  // namespace

absl::Status ForEachSlice(const ShardStore& store,
                          const std::function<absl::Status(int)>& fn) {
  const int num_slices = store.num_slices();
  std::vector<absl::Status> results(num_slices);
  if (store.num_elements() < kParallelApplyElements) {
    for (int s = 0; s < num_slices; ++s) results[s] = fn(s);
  } else {
    store.pool()->Run(num_slices,
                      [&](size_t s) { results[s] = fn(static_cast<int>(s)); });
  }
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ps::update
