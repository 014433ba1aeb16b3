#ifndef PS_PYTHON_NATIVE_RING_H_
#define PS_PYTHON_NATIVE_RING_H_

#include "pybind11/pybind11.h"

namespace ps {

// Adds the all-reduce mode's ring to `module` (paramserver._native):
//
//   join_ring(coordinator, rank, num_workers, job_id, hostname,
//             join_timeout_s, timeout_s) -> NativeRing
//       allreduce::JoinRing: the coordinator's current round, its Gloo ring.
//   NativeRing: round, rank, size; allreduce_sum_(float32 array, tag) and
//       broadcast_(uint8 array, root, tag), in place; buckets(sizes,
//       bucket_bytes) -> NativeBuckets.
//   NativeBuckets (allreduce::BucketedAllreduce): begin(), add(tensor,
//       float32 array, scale), wait(), reduced_into(tensor, float32 array),
//       num_buckets, bucket_of(tensor).
//
// Calls that wait on peers release the GIL. A NativeBuckets keeps its ring
// alive. Errors raise paramserver's exceptions (a peer gone: Unavailable).
// Call once, from the module's init.
void DefineRing(pybind11::module_& module);

}  // namespace ps

#endif  // PS_PYTHON_NATIVE_RING_H_
