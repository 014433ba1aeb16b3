// The CPU cost of the wire compressions on one tensor, beside a memcpy of
// its float32 bytes (the memory bandwidth any pass is bounded by): bf16 and
// fp16 encode and decode (common/wire_encoding.h), top-k selection with
// error feedback (client/tensor_compression.h SparsifyTopK) and, for
// comparison, the selection it replaced (std::nth_element over every
// index), and the top-k encoding of the selection. GB/s counts the tensor's
// float32 bytes; medians of 3 trials.
//
//   bazel run -c opt //bench:compression_bench -- --sizes=1M,16M
//       --topk_ratios=0.01,0.1   (one command line)

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_flags.h"
#include "bench/measure.h"
#include "client/tensor_compression.h"
#include "common/wire_encoding.h"

ABSL_FLAG(std::string, sizes, "1M,16M",
          "Tensor sizes in float32 bytes (K, M, G suffixes), comma-separated");
ABSL_FLAG(std::string, topk_ratios, "0.01,0.1",
          "Top-k ratios, comma-separated");
ABSL_FLAG(int, min_time_ms, 400, "Minimum time of each trial");

namespace ps::bench {
namespace {

// The selection before the sampled threshold: nth_element over all n
// indices by (magnitude, index), kept here as the figure to compare with.
std::vector<float> NthElementTopK(absl::Span<const float> gradient,
                                  double ratio, std::vector<float>* residual) {
  const size_t n = gradient.size();
  std::vector<float> sum(gradient.begin(), gradient.end());
  if (residual->size() == n) {
    for (size_t i = 0; i < n; ++i) sum[i] += (*residual)[i];
  }
  const size_t k = std::min<size_t>(
      n, std::max<size_t>(1, static_cast<size_t>(std::ceil(ratio * n))));
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto larger = [&sum](uint32_t a, uint32_t b) {
    const float ma = std::fabs(sum[a]), mb = std::fabs(sum[b]);
    return ma > mb || (ma == mb && a < b);
  };
  if (k < n) {
    std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
  }
  std::vector<float> sent(n, 0.0f);
  for (size_t j = 0; j < k; ++j) {
    sent[order[j]] = sum[order[j]];
    sum[order[j]] = 0.0f;
  }
  *residual = std::move(sum);
  return sent;
}

void Print(const char* size, const std::string& what,
           const absl::StatusOr<Measurement>& m, double memcpy_ms) {
  if (!m.ok()) {
    std::printf("| %s | %s | failed: %s |\n", size, what.c_str(),
                m.status().ToString().c_str());
    return;
  }
  const double ms = absl::ToDoubleMilliseconds(m->elapsed) / m->rounds;
  std::printf("| %s | %s | %.3f | %.2f | %.1fx |\n", size, what.c_str(), ms,
              m->gbps(), ms / memcpy_ms);
  std::fflush(stdout);
}

int Main() {
  const std::string size_list = absl::GetFlag(FLAGS_sizes);
  const absl::StatusOr<std::vector<uint64_t>> sizes = ParseSizes(size_list);
  if (!sizes.ok()) {
    std::fprintf(stderr, "--sizes: %s\n", sizes.status().ToString().c_str());
    return 2;
  }
  if (absl::Status s = CheckFlagRange(
          "min_time_ms", absl::GetFlag(FLAGS_min_time_ms), 0, 600000);
      !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  MeasureOptions options;
  options.min_time = absl::Milliseconds(absl::GetFlag(FLAGS_min_time_ms));
  std::vector<double> ratios;
  for (absl::string_view r :
       absl::StrSplit(absl::GetFlag(FLAGS_topk_ratios), ',')) {
    double ratio = 0;
    if (!absl::SimpleAtod(r, &ratio) || !(ratio > 0 && ratio <= 1)) {
      std::fprintf(stderr, "--topk_ratios: \"%s\" is not a ratio in (0, 1]\n",
                   std::string(r).c_str());
      return 2;
    }
    ratios.push_back(ratio);
  }
  // Rows are labelled as the sizes were written ("1M").
  const std::vector<std::string> labels = absl::StrSplit(size_list, ',');
  std::printf(
      "| size | pass | ms | GB/s of float32 | x memcpy |\n"
      "| --- | --- | --- | --- | --- |\n");
  for (size_t i = 0; i < sizes->size(); ++i) {
    const std::string size(absl::StripAsciiWhitespace(labels[i]));
    const size_t n = (*sizes)[i] / 4;
    // A gradient's shape: normal, most elements small.
    std::mt19937 random(1);
    std::normal_distribution<float> normal(0.0f, 1e-3f);
    std::vector<float> values(n);
    for (float& v : values) v = normal(random);
    std::vector<float> out(n);

    const absl::StatusOr<Measurement> copy = MeasureMemcpy(options, 4 * n);
    if (!copy.ok()) return 1;
    const double memcpy_ms =
        absl::ToDoubleMilliseconds(copy->elapsed) / copy->rounds;
    Print(size.c_str(), "memcpy", copy, memcpy_ms);
    for (WireEncoding encoding :
         {WireEncoding::kBfloat16, WireEncoding::kFloat16}) {
      const std::string name(WireEncodingName(encoding));
      EncodedChunk chunk;
      Print(size.c_str(), name + " encode",
            MeasureRounds(options, 4 * n,
                          [&] {
                            chunk = EncodeChunk(encoding, values);
                            return absl::OkStatus();
                          }),
            memcpy_ms);
      const absl::Cord wire(chunk.bytes);
      Print(size.c_str(), name + " decode",
            MeasureRounds(options, 4 * n,
                          [&] {
                            return DecodeEncoded(encoding, wire,
                                                 absl::MakeSpan(out),
                                                 chunk.scale_exponent);
                          }),
            memcpy_ms);
    }
    for (double ratio : ratios) {
      const std::string k = absl::StrCat("top-k ", ratio * 100, "%");
      std::vector<float> sent;
      // Each round starts from the same residual: the one a first step
      // left, so that both selections see the same sums.
      std::vector<float> first_residual;
      client_internal::SparsifyTopK(values, ratio, &first_residual);
      std::vector<float> residual;
      Print(size.c_str(), k + " select, nth_element over all (before)",
            MeasureRounds(options, 4 * n,
                          [&] {
                            residual = first_residual;
                            sent = NthElementTopK(values, ratio, &residual);
                            return absl::OkStatus();
                          }),
            memcpy_ms);
      Print(size.c_str(), k + " select, sampled threshold (after)",
            MeasureRounds(options, 4 * n,
                          [&] {
                            residual = first_residual;
                            sent = client_internal::SparsifyTopK(values, ratio,
                                                                 &residual);
                            return absl::OkStatus();
                          }),
            memcpy_ms);
      std::string wire;
      Print(size.c_str(), k + " encode",
            MeasureRounds(options, 4 * n,
                          [&] {
                            wire.clear();
                            AppendEncoded(WireEncoding::kTopK, sent, &wire);
                            return absl::OkStatus();
                          }),
            memcpy_ms);
    }
  }
  return 0;
}

}  // namespace
}  // namespace ps::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ps::bench::Main();
}
