// Fuzzes common/chunk_wire against protobuf's own parser: any message, cut
// into gRPC slices, must parse (ParseChunkMessage, ParseMessage) exactly when
// the generated classes parse its bytes, to the same fields; the tensor bytes
// must outlive the slices; and a parsed chunk message must survive a round
// trip through SerializeChunkMessage.
//
// Input: a byte choosing the message (PushRequest, PullResponse, PullRequest,
// RegisterRequest), a split byte (fuzz/fuzz_input.h), the message's bytes.

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/chunk_wire.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_input.h"
#include "proto/parameter_server.pb.h"

namespace ps::fuzz {
namespace {

template <typename Message>
void CheckChunkMessage(const std::string& bytes, uint8_t split,
                       const ChunkFields& fields) {
  Message message;
  absl::Cord data;
  absl::Status parsed;
  {
    grpc::ByteBuffer buffer = SlicedBuffer(bytes, split);
    parsed = ParseChunkMessage(buffer, fields, &message, &data);
  }  // The slices are gone; `data` must hold what it needs.
  const std::string flat(data);
  Message reference;
  const bool reference_ok = reference.ParseFromString(bytes);
  if (!parsed.ok()) {
    FUZZ_CHECK(!reference_ok, absl::StrCat("refused what protobuf accepts: ",
                                           parsed.ToString()));
    FUZZ_CHECK(parsed.code() == absl::StatusCode::kInvalidArgument,
               parsed.ToString());
    return;
  }
  FUZZ_CHECK(reference_ok, "accepted what protobuf refuses");
  FUZZ_CHECK(flat == reference.chunk().data(), "chunk data differs");
  FUZZ_CHECK(message.chunk().data().empty(), "data copied into the message");
  if (reference.has_chunk()) reference.mutable_chunk()->clear_data();
  FUZZ_CHECK(reference.SerializeAsString() == message.SerializeAsString(),
             absl::StrCat("fields differ: protobuf ", reference.DebugString(),
                          " ours ", message.DebugString()));
  if (!message.has_chunk()) return;

  // Sent back the way the server and the client send it.
  Message head = message;
  proto::TensorChunk chunk = head.chunk();
  head.clear_chunk();
  const grpc::ByteBuffer again =
      SerializeChunkMessage(head, chunk, fields, OwnedSlice(flat));
  Message reparsed;
  absl::Cord reparsed_data;
  const absl::Status s =
      ParseChunkMessage(again, fields, &reparsed, &reparsed_data);
  FUZZ_CHECK(s.ok(), s.ToString());
  FUZZ_CHECK(reparsed.SerializeAsString() == message.SerializeAsString(),
             "round trip changed the fields");
  FUZZ_CHECK(std::string(reparsed_data) == flat, "round trip changed data");
}

template <typename Message>
void CheckMessage(const std::string& bytes, uint8_t split) {
  Message message;
  const absl::Status parsed =
      ParseMessage(SlicedBuffer(bytes, split), &message);
  Message reference;
  const bool reference_ok = reference.ParseFromString(bytes);
  FUZZ_CHECK(
      parsed.ok() == reference_ok,
      absl::StrCat("protobuf ", reference_ok, ", ours ", parsed.ToString()));
  if (!parsed.ok()) return;
  FUZZ_CHECK(reference.SerializeAsString() == message.SerializeAsString(),
             "fields differ");
}

int Run(const uint8_t* input, size_t size) {
  if (size < 2) return 0;
  const uint8_t kind = input[0];
  const uint8_t split = input[1];
  const std::string bytes(reinterpret_cast<const char*>(input) + 2, size - 2);
  switch (kind % 4) {
    case 0:
      CheckChunkMessage<proto::PushRequest>(bytes, split, kPushRequestChunk);
      break;
    case 1:
      CheckChunkMessage<proto::PullResponse>(bytes, split, kPullResponseChunk);
      break;
    case 2:
      CheckMessage<proto::PullRequest>(bytes, split);
      break;
    case 3:
      CheckMessage<proto::RegisterRequest>(bytes, split);
      break;
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
