#include "kernels/device.h"

#include <algorithm>
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

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view device,
                                                       int cpu_threads) {
  // Each choice is logged once the backend exists; failures are returned.
  if (device == "cpu") {
    absl::StatusOr<std::unique_ptr<Backend>> backend = Cpu(cpu_threads);
    if (backend.ok()) spdlog::info("device: cpu (--device=cpu)");
    return backend;
  }
  if (device == "auto") {
    const int count = CudaDeviceCount();
    if (count > 0) {
      absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(0);
      if (backend.ok()) {
        spdlog::info("device: cuda:0 (--device=auto, {} CUDA device(s) found)",
                     count);
      }
      return backend;
    }
    absl::StatusOr<std::unique_ptr<Backend>> backend = Cpu(cpu_threads);
    if (backend.ok()) {
      spdlog::info("device: cpu (--device=auto: {})",
                   CudaCompiledIn() ? "no CUDA device found"
                                    : "this binary was built without CUDA");
    }
    return backend;
  }
  absl::string_view ordinal_text = device;
  int ordinal = 0;
  if (device == "cuda" ||
      (absl::ConsumePrefix(&ordinal_text, "cuda:") && IsDecimal(ordinal_text) &&
       absl::SimpleAtoi(ordinal_text, &ordinal))) {
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        CreateCudaBackend(ordinal);
    if (backend.ok()) {
      spdlog::info("device: cuda:{} (--device={})", ordinal,
                   std::string(device));
    }
    return backend;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "--device=%s: expected auto, cpu, cuda or cuda:<ordinal>", device));
}

}  // namespace ps::kernels
