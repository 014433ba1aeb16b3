#include "allreduce/nccl_group.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda_util.h"

namespace ps::allreduce {
namespace {

using kernels::cuda::DeviceArray;
using kernels::cuda::Stream;

// The Gloo tag of the unique id's broadcast: apart from the buckets' (their
// indices), though none is in flight while a group forms.
constexpr uint32_t kUniqueIdTag = 0x4e43434c;  // "NCCL"

// Between two looks at a collective in flight.
constexpr absl::Duration kPoll = absl::Microseconds(50);

// The NCCL functions this file calls, from libnccl.so.2 loaded at run time.
struct NcclApi {
  decltype(&ncclGetErrorString) GetErrorString;
  decltype(&ncclGetLastError) GetLastError;
  decltype(&ncclGetUniqueId) GetUniqueId;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&ncclCommAbort) CommAbort;
  decltype(&ncclCommFinalize) CommFinalize;
  decltype(&ncclCommDestroy) CommDestroy;
  decltype(&ncclAllReduce) AllReduce;
};

absl::StatusOr<NcclApi> LoadNcclApi() {
  // Never closed: its functions stay in use until the process ends.
  void* library = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL: cannot load libnccl.so.2: ", dlerror()));
  }
  NcclApi api;
  absl::Status status;
  auto find = [&](const char* name, auto& function) {
    void* symbol = dlsym(library, name);
    if (symbol == nullptr && status.ok()) {
      status = absl::FailedPreconditionError(
          absl::StrCat("NCCL: libnccl.so.2 has no ", name));
    }
    function =
        reinterpret_cast<std::remove_reference_t<decltype(function)>>(symbol);
  };
  find("ncclGetErrorString", api.GetErrorString);
  find("ncclGetLastError", api.GetLastError);
  find("ncclGetUniqueId", api.GetUniqueId);
  find("ncclCommInitRankConfig", api.CommInitRankConfig);
  find("ncclCommGetAsyncError", api.CommGetAsyncError);
  find("ncclCommAbort", api.CommAbort);
  find("ncclCommFinalize", api.CommFinalize);
  find("ncclCommDestroy", api.CommDestroy);
  find("ncclAllReduce", api.AllReduce);
  if (!status.ok()) return status;
  return api;
}

// Loaded at the first call, immutable after.
const absl::StatusOr<NcclApi>& LoadedNccl() {
  static const absl::StatusOr<NcclApi>* const api =
      new absl::StatusOr<NcclApi>(LoadNcclApi());
  return *api;
}

// Only once NcclAvailable() is OK (Connect checks it before anything else).
const NcclApi& Api() { return *LoadedNccl(); }

absl::Status NcclError(ncclResult_t result, absl::string_view call,
                       ncclComm_t comm) {
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
      code = absl::StatusCode::kUnavailable;
      break;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      code = absl::StatusCode::kInvalidArgument;
      break;
    default:
      break;
  }
  std::string message =
      absl::StrCat(call, " failed: ", Api().GetErrorString(result));
  // NCCL's own words on the cause ("Duplicate GPU detected ...").
  const char* detail = Api().GetLastError(comm);
  if (detail != nullptr && detail[0] != '\0') {
    absl::StrAppend(&message, ": ", detail);
  }
  return absl::Status(code, message);
}

}  // namespace

bool NcclCompiledIn() { return true; }

absl::Status NcclAvailable() { return LoadedNccl().status(); }

struct NcclGroup::State {
  ncclComm_t comm = nullptr;  // Null once aborted.
  Stream stream;
  absl::Duration timeout;
  absl::Status error;  // The first failure: every later call returns it.
  // ReduceBucket's staging, grown as needed.
  DeviceArray<char> staging;
  size_t staging_bytes = 0;
  std::vector<uint16_t> halves;

  // Tears the communicator down without waiting for peers (ncclCommAbort
  // also ends the kernels in flight), keeping `status` as the group's error.
  absl::Status Fail(absl::Status status) {
    if (comm != nullptr) {
      Api().CommAbort(comm);
      comm = nullptr;
    }
    if (error.ok()) error = std::move(status);
    return error;
  }

  // Polls the communicator until the call that returned `result` is no
  // longer in progress: enqueued (a collective) or formed (init).
  absl::Status AwaitComm(ncclResult_t result, absl::string_view call,
                         absl::Time deadline) {
    while (result == ncclInProgress) {
      if (absl::Now() > deadline) {
        return Fail(absl::DeadlineExceededError(
            absl::StrCat(call, ": no answer from the other ranks within ",
                         absl::FormatDuration(timeout))));
      }
      absl::SleepFor(kPoll);
      if (ncclResult_t r = Api().CommGetAsyncError(comm, &result);
          r != ncclSuccess) {
        return Fail(NcclError(r, "ncclCommGetAsyncError", comm));
      }
    }
    if (result != ncclSuccess) return Fail(NcclError(result, call, comm));
    return absl::OkStatus();
  }

  // Waits for the stream (the collective and the copies around it),
  // watching NCCL's asynchronous errors: a peer's death shows there, while
  // the stream would wait for it forever.
  absl::Status AwaitStream(absl::string_view call, absl::Time deadline) {
    while (true) {
      const cudaError_t done = cudaStreamQuery(stream.get());
      if (done == cudaSuccess) return absl::OkStatus();
      if (done != cudaErrorNotReady) {
        cudaGetLastError();
        return Fail(kernels::cuda::CudaError(done, call));
      }
      ncclResult_t async = ncclSuccess;
      if (ncclResult_t r = Api().CommGetAsyncError(comm, &async);
          r != ncclSuccess) {
        return Fail(NcclError(r, "ncclCommGetAsyncError", comm));
      }
      if (async != ncclSuccess && async != ncclInProgress) {
        return Fail(NcclError(async, call, comm));
      }
      if (absl::Now() > deadline) {
        return Fail(absl::DeadlineExceededError(absl::StrCat(
            call, ": not finished within ", absl::FormatDuration(timeout),
            " (a peer is gone or stalled)")));
      }
      absl::SleepFor(kPoll);
    }
  }

  absl::Status Allreduce(void* data, size_t n, ncclDataType_t type,
                         absl::string_view call) {
    if (!error.ok()) return error;
    if (n == 0) return absl::OkStatus();
    const absl::Time deadline = absl::Now() + timeout;
    const ncclResult_t result =
        Api().AllReduce(data, data, n, type, ncclSum, comm, stream.get());
    if (absl::Status s = AwaitComm(result, call, deadline); !s.ok()) return s;
    return AwaitStream(call, deadline);
  }

  absl::Status Stage(size_t bytes) {
    if (bytes <= staging_bytes) return absl::OkStatus();
    absl::Status s = kernels::cuda::AllocateDevice(bytes, staging);
    staging_bytes = s.ok() ? bytes : 0;
    return s;
  }
};

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Connect(
    GlooGroup& ring, const NcclOptions& options) {
  if (absl::Status s = NcclAvailable(); !s.ok()) return s;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (options.device < 0 || options.device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL group: no CUDA device ", options.device,
                     " (this machine has ", count, ")"));
  }
  PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));

  // [1 if rank 0 made the id, the id]: a rank 0 that failed still sends, so
  // the others fail at once rather than at Gloo's timeout.
  std::vector<char> message(1 + sizeof(ncclUniqueId), 0);
  ncclUniqueId id;
  ncclResult_t made = ncclSuccess;
  if (ring.rank() == 0) {
    made = Api().GetUniqueId(&id);
    if (made == ncclSuccess) {
      message[0] = 1;
      std::memcpy(message.data() + 1, &id, sizeof(id));
    }
  }
  if (absl::Status s = ring.Broadcast(absl::MakeSpan(message), 0, kUniqueIdTag);
      !s.ok()) {
    return s;
  }
  if (made != ncclSuccess) return NcclError(made, "ncclGetUniqueId", nullptr);
  if (message[0] != 1) {
    return absl::UnavailableError(
        "NCCL group: rank 0 could not make the unique id");
  }
  std::memcpy(&id, message.data() + 1, sizeof(id));

  auto state = std::make_unique<State>();
  state->timeout = options.timeout;
  cudaStream_t stream = nullptr;
  PS_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  state->stream.reset(stream);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const absl::Time deadline = absl::Now() + options.timeout;
  const ncclResult_t init = Api().CommInitRankConfig(&state->comm, ring.size(),
                                                     id, ring.rank(), &config);
  if (state->comm == nullptr) {
    return NcclError(init, "ncclCommInitRankConfig", nullptr);
  }
  if (absl::Status s =
          state->AwaitComm(init, "ncclCommInitRankConfig", deadline);
      !s.ok()) {
    return s;
  }
  return absl::WrapUnique(new NcclGroup(ring.rank(), ring.size(),
                                        options.device, std::move(state)));
}

NcclGroup::NcclGroup(int rank, int size, int device,
                     std::unique_ptr<State> state)
    : rank_(rank), size_(size), device_(device), state_(std::move(state)) {}

NcclGroup::~NcclGroup() {
  if (state_->comm == nullptr) return;
  cudaSetDevice(device_);
  // Finalize flushes what is in flight; a peer that is gone could hold it
  // forever, so past the timeout the communicator is aborted instead.
  const absl::Time deadline = absl::Now() + state_->timeout;
  ncclResult_t result = Api().CommFinalize(state_->comm);
  while (result == ncclInProgress && absl::Now() < deadline) {
    absl::SleepFor(kPoll);
    if (Api().CommGetAsyncError(state_->comm, &result) != ncclSuccess) break;
  }
  if (result == ncclSuccess) {
    Api().CommDestroy(state_->comm);
  } else {
    Api().CommAbort(state_->comm);
  }
}

absl::Status NcclGroup::AllreduceSum(float* device_data, size_t n) {
  PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return state_->Allreduce(device_data, n, ncclFloat, "Api().AllReduce(float)");
}

absl::Status NcclGroup::AllreduceSumHalf(uint16_t* device_data, size_t n) {
  PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return state_->Allreduce(device_data, n, ncclHalf, "Api().AllReduce(half)");
}

absl::Status NcclGroup::ReduceBucket(absl::Span<float> bucket,
                                     Compression compression,
                                     uint32_t /*tag*/) {
  State& state = *state_;
  if (!state.error.ok()) return state.error;
  if (bucket.empty()) return absl::OkStatus();
  PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const bool half = compression == Compression::kFp16;
  const void* host = bucket.data();
  size_t bytes = bucket.size() * sizeof(float);
  if (half) {
    state.halves.resize(bucket.size());
    FloatsToHalves(bucket, absl::MakeSpan(state.halves));
    host = state.halves.data();
    bytes = bucket.size() * sizeof(uint16_t);
  }
  if (absl::Status s = state.Stage(bytes); !s.ok()) return s;
  PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(state.staging.get(), host, bytes,
                                          cudaMemcpyHostToDevice,
                                          state.stream.get()));
  absl::Status reduced =
      half ? state.Allreduce(state.staging.get(), bucket.size(), ncclHalf,
                             "Api().AllReduce(half)")
           : state.Allreduce(state.staging.get(), bucket.size(), ncclFloat,
                             "Api().AllReduce(float)");
  if (!reduced.ok()) return reduced;
  void* out = half ? static_cast<void*>(state.halves.data()) : bucket.data();
  PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, state.staging.get(), bytes,
                                          cudaMemcpyDeviceToHost,
                                          state.stream.get()));
  PS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(state.stream.get()));
  if (half) HalvesToFloats(state.halves, bucket);
  return absl::OkStatus();
}

}  // namespace ps::allreduce
