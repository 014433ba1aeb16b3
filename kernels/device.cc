#include "kernels/device.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "spdlog/spdlog.h"

namespace ps::kernels {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> Cpu(int threads) {
  CpuBackendOptions options;
  options.num_threads = threads;
  return CreateCpuBackend(options);
}

// Digits only: SimpleAtoi alone would take "+1" and " 1".
bool IsDecimal(absl::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

}  // namespace

absl::Status CheckBackendRuns(Backend& backend) {
  // relu([-1 2; -3 4]) = [0 2; 0 4], whose square is [0 8; 0 16]: exact in
  // float, so any other result is a broken device, not rounding.
  constexpr float kInput[4] = {-1, 2, -3, 4};
  constexpr float kExpected[4] = {0, 8, 0, 16};
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> x = backend.Allocate(4);
  if (!x.ok()) return x.status();
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> y = backend.Allocate(4);
  if (!y.ok()) return y.status();
  if (absl::Status s = backend.CopyToDevice(kInput, 4, **x, 0); !s.ok()) {
    return s;
  }
  if (absl::Status s = backend.Relu(4, **x, **y); !s.ok()) return s;
  if (absl::Status s =
          backend.Gemm(false, false, 2, 2, 2, 1.0f, **y, **y, 0.0f, **x);
      !s.ok()) {
    return s;
  }
  float result[4] = {};
  if (absl::Status s = backend.CopyToHost(**x, 0, 4, result); !s.ok()) {
    return s;
  }
  if (absl::Status s = backend.Synchronize(); !s.ok()) return s;
  for (int i = 0; i < 4; ++i) {
    if (result[i] != kExpected[i]) {
      return absl::InternalError(
          absl::StrFormat("%s computed %g instead of %g in a test product",
                          backend.name(), result[i], kExpected[i]));
    }
  }
  return absl::OkStatus();
}

namespace internal {

absl::StatusOr<std::unique_ptr<Backend>> CreateAutoBackend(
    int cuda_devices,
    const std::function<absl::StatusOr<std::unique_ptr<Backend>>()>&
        create_cuda,
    int cpu_threads) {
  std::string why;
  if (cuda_devices > 0) {
    // Scoped: a device that is not used is released before the CPU backend
    // starts.
    absl::StatusOr<std::unique_ptr<Backend>> cuda = create_cuda();
    const absl::Status usable =
        cuda.ok() ? CheckBackendRuns(**cuda) : cuda.status();
    if (usable.ok()) {
      spdlog::info("device: {} (--device=auto, {} CUDA device(s) found)",
                   (*cuda)->name(), cuda_devices);
      return cuda;
    }
    why = absl::StrFormat(
        "the CUDA device is not usable: %s (this build's CUDA code is for "
        "compute capability 8.x and 9.x, sm_80 and sm_90: A100, A10, L4, "
        "H100, with PTX for newer; an older GPU such as a T4 or V100 fails "
        "like this, and --device=cuda would fail outright)",
        usable.ToString());
  } else {
    why = CudaCompiledIn() ? "no CUDA device found"
                           : "this binary was built without CUDA";
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend = Cpu(cpu_threads);
  if (backend.ok()) {
    if (cuda_devices > 0) {
      spdlog::warn("device: cpu (--device=auto: {})", why);
    } else {
      spdlog::info("device: cpu (--device=auto: {})", why);
    }
  }
  return backend;
}

}  // namespace internal

int LocalCudaOrdinal(int local_rank, int device_count) {
  if (device_count <= 0 || local_rank < 0) return 0;
  return local_rank % device_count;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view device,
                                                       int cpu_threads,
                                                       int local_rank) {
  // Each choice is logged once the backend exists; failures are returned.
  if (device == "cpu") {
    absl::StatusOr<std::unique_ptr<Backend>> backend = Cpu(cpu_threads);
    if (backend.ok()) spdlog::info("device: cpu (--device=cpu)");
    return backend;
  }
  const int device_count = CudaDeviceCount();
  const int local_ordinal = LocalCudaOrdinal(local_rank, device_count);
  if (device == "auto") {
    return internal::CreateAutoBackend(
        device_count, [&] { return CreateCudaBackend(local_ordinal); },
        cpu_threads);
  }
  absl::string_view ordinal_text = device;
  int ordinal = local_ordinal;
  if (device == "cuda" ||
      (absl::ConsumePrefix(&ordinal_text, "cuda:") && IsDecimal(ordinal_text) &&
       absl::SimpleAtoi(ordinal_text, &ordinal))) {
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        CreateCudaBackend(ordinal);
    if (backend.ok()) {
      if (device == "cuda") {
        spdlog::info(
            "device: cuda:{} (--device=cuda: local rank {} of a "
            "host with {} CUDA device(s))",
            ordinal, local_rank, device_count);
      } else {
        spdlog::info("device: cuda:{} (--device={})", ordinal,
                     std::string(device));
      }
    }
    return backend;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "--device=%s: expected auto, cpu, cuda or cuda:<ordinal>", device));
}

}  // namespace ps::kernels
