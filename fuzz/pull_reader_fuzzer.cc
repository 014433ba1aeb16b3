// Fuzzes what a client does with a shard's answer to a pull
// (client/pull_reader.h), message by message as ReceiveWeights does: bytes
// cut into gRPC slices -> PullReader::Add, then Finish, against a fixed
// partition. Checks the reader against a simpler model of a right answer:
// the chunks, parsed by protobuf, list the shard's elements one by one, in
// the partition's order, never crossing a slice, each with float32, the
// model's shape and four bytes an element. The reader accepts exactly such
// answers, writes their values to exactly the shard's elements, and keeps
// the first message's version.
//
// Input: as push_stream's (fuzz/fuzz_input.h); options bit 0 is the server.

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/pull_reader.h"
#include "common/partition.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_input.h"
#include "proto/parameter_server.pb.h"

namespace ps::fuzz {
namespace {

using client_internal::PullReader;
using client_internal::ShapeWeights;

// Written to every element first: what the reader did not write keeps it.
constexpr uint32_t kUnwritten = 0x7fc0dead;

const Partition& PullPartition() {
  static const Partition* const partition = [] {
    absl::StatusOr<Partition> p = Partition::Create(PushModel(), kNumServers);
    FUZZ_CHECK(p.ok(), p.status().ToString());
    return new Partition(*std::move(p));
  }();
  return *partition;
}

uint32_t Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

// One element the shard holds, in the order its answer must list them.
struct Element {
  uint32_t tensor_id = 0;
  uint64_t index = 0;
  size_t slice = 0;
  // The bits the answer gave it.
  uint32_t bits = kUnwritten;
};

// Whether `response` continues a right answer at `*next`, recording its
// values; advances `*next`.
bool TakeChunk(const ModelSpec& model, const proto::PullResponse& response,
               std::vector<Element>& elements, size_t* next) {
  const proto::TensorChunk& c = response.chunk();
  const uint64_t n = c.num_elements();
  if (n == 0 || n > elements.size() - *next) return false;
  if (c.dtype() != proto::DTYPE_FLOAT32 || c.data().size() != n * 4) {
    return false;
  }
  const Element& first = elements[*next];
  for (uint64_t i = 0; i < n; ++i) {
    const Element& e = elements[*next + i];
    if (e.tensor_id != c.tensor_id() || e.index != c.offset() + i ||
        e.slice != first.slice) {
      return false;
    }
  }
  const std::vector<int64_t>& shape = model.tensors[first.tensor_id].shape;
  if (std::vector<int64_t>(c.shape().begin(), c.shape().end()) != shape) {
    return false;
  }
  for (uint64_t i = 0; i < n; ++i) {
    std::memcpy(&elements[*next + i].bits, c.data().data() + 4 * i, 4);
  }
  *next += n;
  return true;
}

int Run(const uint8_t* input, size_t size) {
  const PushStreamInput stream = DecodePushStream(
      absl::string_view(reinterpret_cast<const char*>(input), size));
  const Partition& partition = PullPartition();
  const ModelSpec& model = partition.model();
  const int server = stream.options & 1;

  std::vector<Element> elements;
  const std::vector<Slice>& slices = partition.SlicesOfServer(server);
  for (size_t s = 0; s < slices.size(); ++s) {
    for (uint64_t i = 0; i < slices[s].num_elements; ++i) {
      elements.push_back({slices[s].tensor_id, slices[s].offset + i, s});
    }
  }

  TensorValues weights;
  ShapeWeights(model, weights);
  for (std::vector<float>& tensor : weights) {
    for (float& w : tensor) std::memcpy(&w, &kUnwritten, 4);
  }
  PullReader reader(partition, server, weights);
  bool right = true;
  size_t next = 0;
  std::optional<uint64_t> version;
  for (size_t m = 0; m < stream.messages.size(); ++m) {
    const FramedMessage& framed = stream.messages[m];
    reader.Add(SlicedBuffer(framed.bytes, framed.split));
    if (!right) continue;
    proto::PullResponse response;
    if (!response.ParseFromString(framed.bytes)) {
      right = false;
      continue;
    }
    if (m == 0) version = response.version();
    right = TakeChunk(model, response, elements, &next);
  }
  right = right && next == elements.size();

  FUZZ_CHECK(reader.version() == version, "the version is not the first's");
  const absl::Status status = reader.Finish();
  if (!status.ok()) {
    FUZZ_CHECK(!right,
               absl::StrCat("refused a right answer: ", status.ToString()));
    FUZZ_CHECK(status.code() == absl::StatusCode::kDataLoss ||
                   status.code() == absl::StatusCode::kInvalidArgument,
               status.ToString());
    return 0;
  }
  FUZZ_CHECK(right, "accepted a wrong answer");
  std::vector<std::vector<bool>> held(model.tensors.size());
  for (size_t t = 0; t < held.size(); ++t) {
    held[t].resize(weights[t].size(), false);
  }
  for (const Element& e : elements) {
    FUZZ_CHECK(Bits(weights[e.tensor_id][e.index]) == e.bits,
               absl::StrCat("tensor ", e.tensor_id, " element ", e.index,
                            " is not what the shard sent"));
    held[e.tensor_id][e.index] = true;
  }
  for (size_t t = 0; t < held.size(); ++t) {
    for (size_t i = 0; i < held[t].size(); ++i) {
      FUZZ_CHECK(held[t][i] || Bits(weights[t][i]) == kUnwritten,
                 absl::StrCat("wrote tensor ", t, " element ", i,
                              ", which the shard does not hold"));
    }
  }
  return 0;
}

}  // namespace
}  // namespace ps::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  ps::fuzz::SilenceProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ps::fuzz::Run(data, size);
}
