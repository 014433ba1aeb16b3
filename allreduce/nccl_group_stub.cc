// NcclGroup for builds without NCCL (NCCL_ENABLED is False in
// @local_cuda//:defs.bzl), so that callers need no #ifdefs.

#include <memory>

#include "allreduce/nccl_group.h"

namespace ps::allreduce {

bool NcclCompiledIn() { return false; }

absl::Status NcclAvailable() {
  return absl::UnimplementedError(
      "NCCL group: this binary was built without NCCL (see "
      "bazel/cuda_configure.bzl)");
}

struct NcclGroup::State {};

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Connect(
    GlooGroup& /*ring*/, const NcclOptions& /*options*/) {
  return NcclAvailable();
}

NcclGroup::NcclGroup(int rank, int size, int device,
                     std::unique_ptr<State> state)
    : rank_(rank), size_(size), device_(device), state_(std::move(state)) {}

NcclGroup::~NcclGroup() = default;

absl::Status NcclGroup::AllreduceSum(float* /*device_data*/, size_t /*n*/) {
  return absl::UnimplementedError("NCCL group: built without NCCL");
}

absl::Status NcclGroup::AllreduceSumHalf(uint16_t* /*device_data*/,
                                         size_t /*n*/) {
  return absl::UnimplementedError("NCCL group: built without NCCL");
}

absl::Status NcclGroup::ReduceBucket(absl::Span<float> /*bucket*/,
                                     Compression /*compression*/,
                                     uint32_t /*tag*/) {
  return absl::UnimplementedError("NCCL group: built without NCCL");
}

}  // namespace ps::allreduce
