#ifndef PS_FUZZ_FUZZ_INPUT_H_
#define PS_FUZZ_FUZZ_INPUT_H_

// How the fuzz targets read their input, shared with the seed corpus
// generator (fuzz/make_corpus.cc) so that seeds and targets agree.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/model_spec.h"
#include "grpcpp/support/byte_buffer.h"

namespace ps::fuzz {

// `bytes` as gRPC might hand them over: cut into slices whose sizes follow
// from `split` (0: one slice). Sizes range over both sides of gRPC's
// inlined-slice limit (small slices live inside the slice object), and a
// few slices are empty.
grpc::ByteBuffer SlicedBuffer(absl::string_view bytes, uint8_t split);

// Turns off protobuf's log lines (one per string field of bad UTF-8, say),
// which would bury libFuzzer's output. For LLVMFuzzerInitialize.
void SilenceProtobufLogs();

// One message of a stream: its bytes and how they are sliced.
struct FramedMessage {
  uint8_t split = 0;
  std::string bytes;
};

// A push stream input: an options byte, then per message a 2-byte
// little-endian length, a split byte and that many bytes (the last message
// takes what is left if the input is shorter).
struct PushStreamInput {
  // Bit 0: server index; bit 1: let non-finite gradients pass; bits 2-3:
  // the minimum chunk size, 1, 4, 16 or 64 elements.
  uint8_t options = 0;
  std::vector<FramedMessage> messages;
};

PushStreamInput DecodePushStream(absl::string_view input);
std::string EncodePushStream(const PushStreamInput& stream);

// What the push stream target stages against: an MLP 20-30-5 plus a
// from_rank0 tensor, over kNumServers servers of job kJobId.
inline constexpr int kNumServers = 2;
inline constexpr int kNumWorkers = 3;
inline constexpr char kJobId[] = "fuzz-job";
ModelSpec PushModel();

}  // namespace ps::fuzz

#endif  // PS_FUZZ_FUZZ_INPUT_H_
