#ifndef PS_ALLREDUCE_NCCL_GROUP_H_
#define PS_ALLREDUCE_NCCL_GROUP_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "allreduce/bucket_reducer.h"
#include "allreduce/compression.h"
#include "allreduce/gloo_group.h"

namespace ps::allreduce {

// True when this binary was built with NCCL (bazel/cuda_configure.bzl found
// nccl.h and libnccl.so); when false, NcclGroup::Connect is Unimplemented.
bool NcclCompiledIn();

// Whether NCCL can be used here: OK once libnccl.so.2 is loaded (at the
// first call, with dlopen, so that a binary built with NCCL still starts on
// a machine without it); FailedPrecondition saying why not (dlerror's
// words), or Unimplemented without NCCL compiled in. Thread-safe.
absl::Status NcclAvailable();

struct NcclOptions {
  // The CUDA device this rank's communicator and buffers live on. NCCL
  // refuses two ranks of one communicator on one device ("Duplicate GPU
  // detected"): one rank per GPU.
  int device = 0;
  // Of forming the communicator and of each collective: past it the
  // communicator is aborted (a dead or silent peer is an error, not a hang).
  absl::Duration timeout = absl::Seconds(60);
};

// The workers' ring on GPUs: one NCCL communicator per rank, formed over an
// existing GlooGroup of the same ranks (rank 0 makes NCCL's unique id and
// broadcasts it over the Gloo ring, so the id travels through our
// rendezvous), and NCCL's all-reduce of device buffers.
//
// The communicator is non-blocking: every call polls ncclCommGetAsyncError
// and the group's CUDA stream until done, so that an error of NCCL or of a
// peer, or silence past the timeout, aborts the communicator
// (ncclCommAbort) and returns a status: Unavailable for a peer's or
// system's failure, DeadlineExceeded for the timeout, InvalidArgument for a
// usage NCCL refuses (two ranks on one device), Internal otherwise, each
// naming the call and ncclGetErrorString. After an error every call fails:
// the ring must be formed again.
//
// Collectives run on a CUDA stream of the group's own (the backend keeps
// its stream private); the caller must have finished writing the buffers
// (our backend's copies and Synchronize return once they have), and a
// collective returns once its result is in place.
//
// Not thread-safe: one thread at a time. Owns the communicator, the stream
// and the staging memory of ReduceBucket; borrows nothing after Connect.
class NcclGroup final : public BucketReducer {
 public:
  // Every rank of `ring` calls this, with its own device. NcclAvailable's
  // error without NCCL; FailedPrecondition when `options.device` does not
  // exist.
  static absl::StatusOr<std::unique_ptr<NcclGroup>> Connect(
      GlooGroup& ring, const NcclOptions& options);
  ~NcclGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }

  // Replaces `n` floats of device memory at `device_data` on every rank
  // with their sum over the ranks (ncclAllReduce, ncclFloat, ncclSum: float32
  // additions in NCCL's order, which depends on the ranks, the length and
  // the topology only, so reruns on the same machines repeat bit for bit).
  absl::Status AllreduceSum(float* device_data, size_t n);
  // The same for binary16 bits (ncclHalf): NCCL adds in binary16, each
  // addition rounded to nearest even.
  absl::Status AllreduceSumHalf(uint16_t* device_data, size_t n);

  // A host bucket through device memory: copied in, AllreduceSum (or with
  // kFp16: rounded to binary16 on the host, half the bytes copied,
  // AllreduceSumHalf, widened back; see Fp16SumBound), copied out. `tag` is
  // unused: NCCL orders collectives by their issue order.
  absl::Status ReduceBucket(absl::Span<float> bucket, Compression compression,
                            uint32_t tag) override;

 private:
  struct State;  // CUDA and NCCL handles: nccl_group.cc.

  NcclGroup(int rank, int size, int device, std::unique_ptr<State> state);

  const int rank_;
  const int size_;
  const int device_;
  const std::unique_ptr<State> state_;
};

}  // namespace ps::allreduce

#endif  // PS_ALLREDUCE_NCCL_GROUP_H_
