#ifndef PS_UPDATE_SLICE_APPLY_H_
#define PS_UPDATE_SLICE_APPLY_H_

#include <functional>

#include "absl/status/status.h"
#include "update/shard_store.h"

namespace ps::update {

// Runs fn(slice) for every slice of `store`: on the calling thread for small
// shards (threads would cost more than they save), else on the store's
// pool, where fn may again split its slice's elements (ShardStore's
// ApplyGradient does). Returns the first error in slice order after every
// call has finished.
absl::Status ForEachSlice(const ShardStore& store,
                          const std::function<absl::Status(int)>& fn);

}  // namespace ps::update

#endif  // PS_UPDATE_SLICE_APPLY_H_
