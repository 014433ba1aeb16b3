#include "fuzz/fuzz_input.h"

#include <algorithm>
#include <utility>

#include "google/protobuf/stubs/logging.h"
#include "grpcpp/support/slice.h"

namespace ps::fuzz {

grpc::ByteBuffer SlicedBuffer(absl::string_view bytes, uint8_t split) {
  std::vector<grpc::Slice> slices;
  if (split == 0) {
    slices.emplace_back(bytes.data(), bytes.size());
  } else {
    // A small generator seeded by the split byte and the length: the same
    // input always gives the same slices.
    uint32_t state = split * 2654435761u + static_cast<uint32_t>(bytes.size());
    auto next = [&state] {
      state = state * 1664525u + 1013904223u;
      return state >> 8;
    };
    // Up to 64 bytes (the inline limit is 23), or up to 1 KiB.
    const size_t max_piece = split & 0x80 ? 1024 : 1 + split % 64;
    size_t at = 0;
    while (at < bytes.size()) {
      if (next() % 16 == 0) {
        slices.emplace_back();  // Empty.
        continue;
      }
      const size_t n =
          std::min<size_t>(1 + next() % max_piece, bytes.size() - at);
      slices.emplace_back(bytes.data() + at, n);
      at += n;
    }
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

void SilenceProtobufLogs() { google::protobuf::SetLogHandler(nullptr); }

PushStreamInput DecodePushStream(absl::string_view input) {
  PushStreamInput stream;
  if (input.empty()) return stream;
  stream.options = static_cast<uint8_t>(input[0]);
  input.remove_prefix(1);
  while (input.size() >= 3) {
    const size_t length = static_cast<uint8_t>(input[0]) |
                          static_cast<size_t>(static_cast<uint8_t>(input[1]))
                              << 8;
    FramedMessage m;
    m.split = static_cast<uint8_t>(input[2]);
    input.remove_prefix(3);
    const size_t n = std::min(length, input.size());
    m.bytes = std::string(input.substr(0, n));
    input.remove_prefix(n);
    stream.messages.push_back(std::move(m));
  }
  return stream;
}

std::string EncodePushStream(const PushStreamInput& stream) {
  std::string out(1, static_cast<char>(stream.options));
  for (const FramedMessage& m : stream.messages) {
    const size_t n = std::min<size_t>(m.bytes.size(), 0xffff);
    out.push_back(static_cast<char>(n & 0xff));
    out.push_back(static_cast<char>(n >> 8));
    out.push_back(static_cast<char>(m.split));
    out.append(m.bytes, 0, n);
  }
  return out;
}

ModelSpec PushModel() {
  ModelSpec model = MlpModelSpec({20, 30, 5});
  TensorSpec embedding;
  embedding.name = "embedding";
  embedding.shape = {7, 3};
  embedding.initializer = InitializerSpec::FromRank0();
  model.tensors.push_back(std::move(embedding));
  return model;
}

}  // namespace ps::fuzz
