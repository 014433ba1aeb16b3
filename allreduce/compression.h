#ifndef PS_ALLREDUCE_COMPRESSION_H_
#define PS_ALLREDUCE_COMPRESSION_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps::allreduce {

// How a bucket travels in the ring (--allreduce_compression).
//  kNone: float32, summed in float32.
//  kFp16: each rank rounds its values to IEEE binary16 (round to nearest,
//         ties to even; beyond 65504 to infinity), the ring sums the halves
//         (each addition rounded to binary16: Gloo adds in float32 and rounds,
//         NCCL adds in binary16), and the sum is widened back to float32.
//         Half the bytes on the wire; the error is bounded by Fp16SumBound.
enum class Compression { kNone, kFp16 };

// "none" or "fp16"; InvalidArgument otherwise.
absl::StatusOr<Compression> ParseCompression(absl::string_view name);
absl::string_view CompressionName(Compression compression);

// Bits of IEEE binary16 <-> float32. FloatToHalf rounds to nearest, ties to
// even (subnormal halves included), keeps the sign of zero and infinities,
// and maps NaN to a quiet NaN; HalfToFloat is exact.
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t half);
// The same over spans of equal length (`out` as long as `in`), with x86's
// F16C instructions where the CPU has them: the same bits, but for the
// payload of a NaN.
void FloatsToHalves(absl::Span<const float> in, absl::Span<uint16_t> out);
void HalvesToFloats(absl::Span<const uint16_t> in, absl::Span<float> out);
// out[i] = the binary16 nearest to float32(a[i]) + float32(b[i]) (`out` may
// alias `a` or `b`): a ring's reduction step for fp16 buckets.
void SumHalvesInFloat(const uint16_t* a, const uint16_t* b, uint16_t* out,
                      size_t n);

// The bound on |fp16 ring sum - exact sum| for `num_ranks` terms x_r whose
// absolute values sum to `abs_sum`, while every partial sum stays below
// binary16's largest finite value (65504): each of the num_ranks
// conversions and num_ranks - 1 additions rounds once, relatively by at most
// u = 2^-11 + 2^-24 (binary16's unit roundoff, and float32's for Gloo's
// float addition before it), or absolutely by 2^-25 in binary16's subnormal
// range; so |error| <= gamma(2 num_ranks) * abs_sum + 2 num_ranks 2^-25,
// gamma(k) = k u / (1 - k u) (Higham, Accuracy and Stability, 3.1).
double Fp16SumBound(double abs_sum, int num_ranks);

}  // namespace ps::allreduce

#endif  // PS_ALLREDUCE_COMPRESSION_H_
