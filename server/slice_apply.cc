#include "server/slice_apply.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace ps::server {
namespace {

// Below this many elements an update is applied on the calling thread.
constexpr uint64_t kParallelApplyElements = 1 << 20;
constexpr unsigned kMaxApplyThreads = 8;

}  // namespace

absl::Status ForEachSlice(const ShardStore& store,
                          const std::function<absl::Status(int)>& fn) {
  const int num_slices = store.num_slices();
  const unsigned threads =
      store.num_elements() < kParallelApplyElements
          ? 1
          : std::min({std::max(1u, std::thread::hardware_concurrency()),
                      kMaxApplyThreads, static_cast<unsigned>(num_slices)});
  std::vector<absl::Status> results(num_slices);
  std::atomic<int> next{0};
  auto work = [&] {
    for (int s = next++; s < num_slices; s = next++) results[s] = fn(s);
  };
  std::vector<std::thread> helpers;
  for (unsigned t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ps::server
