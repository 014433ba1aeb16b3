// Convolution forward + backward FLOP rate of the Fashion-MNIST CNN's layers
// against the GEMMs they reduce to, on one OpenBLAS thread (or a GPU with
// --device=cuda). See bench/README.md.
#include <cblas.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/bench_flags.h"
#include "bench/conv_bench.h"
#include "bench/measure.h"
#include "common/cpu_affinity.h"
#include "kernels/device.h"

ABSL_FLAG(int, batch, 64, "Images per batch.");
ABSL_FLAG(std::string, device, "cpu",
          "Backend: cpu (one OpenBLAS thread), cuda or cuda:<n>.");
ABSL_FLAG(std::string, cpus, "",
          "CPUs of this process (kernel list format, e.g. \"1\"); empty: "
          "any.");
ABSL_FLAG(int, rounds, 2, "Minimum timed rounds per trial.");
ABSL_FLAG(int, trials, 5, "Timed trials per measurement; the median counts.");
ABSL_FLAG(int, warmup, 2, "Untimed rounds before each measurement.");
ABSL_FLAG(int, min_time_ms, 400,
          "Minimum time per trial; 0 runs exactly --rounds.");

namespace ps::bench {
namespace {

absl::StatusOr<MeasureOptions> OptionsFromFlags() {
  for (absl::Status s :
       {CheckFlagRange("batch", absl::GetFlag(FLAGS_batch), 1, 1 << 16),
        CheckFlagRange("rounds", absl::GetFlag(FLAGS_rounds), 1, 1000000),
        CheckFlagRange("warmup", absl::GetFlag(FLAGS_warmup), 0, 1000),
        CheckFlagRange("trials", absl::GetFlag(FLAGS_trials), 1, 1000),
        CheckFlagRange("min_time_ms", absl::GetFlag(FLAGS_min_time_ms), 0,
                       600000)}) {
    if (!s.ok()) return s;
  }
  MeasureOptions options;
  options.min_rounds = absl::GetFlag(FLAGS_rounds);
  options.warmup_rounds = absl::GetFlag(FLAGS_warmup);
  options.trials = absl::GetFlag(FLAGS_trials);
  options.min_time = absl::Milliseconds(absl::GetFlag(FLAGS_min_time_ms));
  return options;
}

// GFLOP per CPU-second: steadier than wall-clock GFLOP/s when other work
// competes for the cores.
double CpuGflops(const Measurement& m) {
  const double ns = m.cpu_ns_per_byte();
  return ns > 0 ? 1.0 / ns : 0.0;
}

void PrintRow(const char* layer, const char* pass, const ConvFigures& f) {
  std::printf("%-6s %-16s %8.2f %8.2f %7.2f   %8.2f %8.2f\n", layer, pass,
              f.conv.gbps(), f.gemm.gbps(), f.ratio, CpuGflops(f.conv),
              CpuGflops(f.gemm));
}

int Run() {
  absl::StatusOr<MeasureOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "conv_bench: %s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::vector<int>> cpus =
      CpusFromFlag("cpus", absl::GetFlag(FLAGS_cpus));
  if (!cpus.ok()) {
    std::fprintf(stderr, "conv_bench: %s\n",
                 std::string(cpus.status().message()).c_str());
    return 2;
  }
  if (!cpus->empty()) {
    if (absl::Status s = RestrictProcessToCpus(*cpus); !s.ok()) {
      std::fprintf(stderr, "conv_bench: --cpus: %s\n",
                   std::string(s.message()).c_str());
      return 2;
    }
  }
  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateBackend(absl::GetFlag(FLAGS_device), /*cpu_threads=*/1);
  if (!backend.ok()) {
    std::fprintf(stderr, "conv_bench: %s\n",
                 backend.status().ToString().c_str());
    return 2;
  }
  const bool cpu = (*backend)->name() == "cpu";
  std::printf(
      "conv_bench: %s backend%s, batch %d, CPUs %s.\n"
      "conv: the backend's Conv2d passes (CPU: im2col + one sgemm an image, "
      "col2im for the data gradient).\nsgemm: the same products as three "
      "single Gemm calls on operands already laid out (the batch's im2col "
      "matrix, no per-image split):\n  forward W[out x k] * cols[k x n], "
      "data W^T * dy[out x n], filter dy * cols^T; k = in_channels x kernel "
      "area, n = batch x output area.\nGFLOP/s = 1e9 FLOP (2 per multiply-"
      "add) per second, median of %d trials of >= %d rounds and >= %d ms;\n"
      "conv and sgemm trials take turns, ratio is the median of the pairs' "
      "ratios (issue 19's target for fwd+bwd: >= 0.5); the last two columns "
      "are per CPU-second.\n\n",
      (*backend)->name().c_str(),
      cpu ? absl::StrCat(", 1 OpenBLAS thread, core ", openblas_get_corename())
                .c_str()
          : "",
      absl::GetFlag(FLAGS_batch),
      cpus->empty() ? "any" : FormatCpuList(*cpus).c_str(), options->trials,
      options->min_rounds, absl::GetFlag(FLAGS_min_time_ms));
  std::printf("%-6s %-16s %8s %8s %7s   %8s %8s\n", "layer", "pass", "conv",
              "sgemm", "ratio", "conv/cpu", "sgemm/cpu");
  std::fflush(stdout);
  for (const ConvLayer& layer :
       FashionMnistCnnLayers(absl::GetFlag(FLAGS_batch))) {
    std::printf("%s: %s\n", layer.name.c_str(),
                DescribeShape(layer.shape).c_str());
    absl::StatusOr<ConvLayerResult> result =
        MeasureConvLayer(**backend, layer, *options);
    if (!result.ok()) {
      std::fprintf(stderr, "conv_bench: %s: %s\n", layer.name.c_str(),
                   result.status().ToString().c_str());
      return 1;
    }
    const char* name = layer.name.c_str();
    PrintRow(name, "forward", result->forward);
    PrintRow(name, "backward data", result->backward_data);
    PrintRow(name, "backward filter", result->backward_filter);
    PrintRow(name, "fwd+bwd", result->all);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace ps::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Convolution forward + backward GFLOP/s of the Fashion-MNIST CNN's "
      "layers next to sgemm's for the same products.\n"
      "  bazel run -c opt //bench:conv_bench -- --batch=64");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "conv_bench: unexpected argument \"%s\"\n", rest[1]);
    return 2;
  }
  return ps::bench::Run();
}
