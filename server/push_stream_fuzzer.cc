// Fuzzes what a server does with a push stream, message by message as
// ParameterService does: bytes cut into gRPC slices -> ParseChunkMessage ->
// PushStager::Add, then Finish, against a fixed shard. Checks that the
// parser agrees with protobuf's, that the tensor bytes outlive the slices
// they were parsed from, and that an accepted push holds every owned element
// exactly once with the values sent.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/chunk_wire.h"
#include "common/partition.h"
#include "common/tensor_codec.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_input.h"
#include "proto/parameter_server.pb.h"
#include "server/push_message_proto.h"
#include "server/push_stager.h"
#include "update/shard_store.h"

namespace ps::fuzz {
namespace {

using server::PushMessage;
using server::PushMessageFromProto;
using server::PushStager;
using server::StagedPush;
using update::ShardStore;

struct Shard {
  std::unique_ptr<ShardStore> store;
  server::ShardIdentity identity;
};

const std::vector<Shard>& Shards() {
  static const std::vector<Shard>* const shards = [] {
    auto* out = new std::vector<Shard>;
    absl::StatusOr<Partition> partition =
        Partition::Create(PushModel(), kNumServers);
    FUZZ_CHECK(partition.ok(), partition.status().ToString());
    for (int s = 0; s < kNumServers; ++s) {
      absl::StatusOr<std::unique_ptr<ShardStore>> store =
          ShardStore::Create(*partition, s, update::OptimizerConfig());
      FUZZ_CHECK(store.ok(), store.status().ToString());
      out->push_back({*std::move(store),
                      {partition->fingerprint(), s, kNumWorkers, kJobId}});
    }
    return out;
  }();
  return *shards;
}

uint32_t BitsAt(const std::string& bytes, size_t element) {
  uint32_t bits;
  std::memcpy(&bits, bytes.data() + element * 4, 4);
  return bits;  // This target runs on little-endian hosts only.
}

bool FiniteBits(uint32_t bits) { return (bits & 0x7f800000u) != 0x7f800000u; }

// Our parser accepts exactly what protobuf's accepts, and reads the same.
void CheckAgainstProtobuf(const std::string& bytes, const absl::Status& parsed,
                          const proto::PushRequest& request,
                          const std::string& data) {
  proto::PushRequest reference;
  const bool reference_ok = reference.ParseFromString(bytes);
  if (!parsed.ok()) {
    FUZZ_CHECK(!reference_ok, absl::StrCat("refused what protobuf accepts: ",
                                           parsed.ToString()));
    FUZZ_CHECK(parsed.code() == absl::StatusCode::kInvalidArgument,
               parsed.ToString());
    return;
  }
  FUZZ_CHECK(reference_ok, "accepted what protobuf refuses");
  FUZZ_CHECK(data == reference.chunk().data(), "chunk data differs");
  if (reference.has_chunk()) reference.mutable_chunk()->clear_data();
  FUZZ_CHECK(reference.SerializeAsString() == request.SerializeAsString(),
             absl::StrCat("fields differ: protobuf ", reference.DebugString(),
                          " ours ", request.DebugString()));
}

// The scan over the cord's pieces finds what a scan of the flat bytes does.
void CheckNonFiniteScan(const absl::Cord& data, const std::string& flat) {
  const uint64_t elements = flat.size() / 4;
  uint64_t first = elements;
  for (uint64_t i = 0; i < elements; ++i) {
    if (!FiniteBits(BitsAt(flat, i))) {
      first = i;
      break;
    }
  }
  FUZZ_CHECK(FirstNonFinite(data) == first, "FirstNonFinite differs");
}

// What the stager has taken so far, element by element.
struct Expected {
  explicit Expected(const ShardStore& store) {
    for (const Slice& s : store.slices()) {
      times.emplace_back(s.num_elements, 0);
      bits.emplace_back(s.num_elements, 0);
    }
  }
  std::vector<std::vector<int>> times;
  std::vector<std::vector<uint32_t>> bits;
};

void RecordAccepted(const ShardStore& store, const PushMessage& m,
                    const std::string& data, bool finite_only,
                    Expected* expected) {
  const server::ChunkView& c = m.chunk;
  const int slice = store.FindSlice(c.tensor_id, c.offset, c.num_elements);
  FUZZ_CHECK(slice >= 0, "accepted a chunk outside the shard's slices");
  FUZZ_CHECK(c.num_elements > 0 && data.size() == c.num_elements * 4,
             "accepted a chunk whose size does not match its data");
  FUZZ_CHECK(!m.initial_values || store.TakesValuesFromRank0(slice),
             "accepted initial values for a tensor not from rank 0");
  const uint64_t begin = c.offset - store.slices()[slice].offset;
  for (uint64_t i = 0; i < c.num_elements; ++i) {
    const uint32_t bits = BitsAt(data, i);
    FUZZ_CHECK(!finite_only || FiniteBits(bits), "accepted a non-finite value");
    FUZZ_CHECK(expected->times[slice][begin + i]++ == 0,
               absl::StrCat("element ", c.offset + i, " accepted twice"));
    expected->bits[slice][begin + i] = bits;
  }
}

void ReadAndCompare(const server::SliceGradient& gradient, uint64_t begin,
                    uint64_t n, const std::vector<uint32_t>& bits) {
  std::vector<float> values(n);
  gradient.Read(begin, absl::MakeSpan(values));
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t got;
    std::memcpy(&got, &values[i], 4);
    FUZZ_CHECK(got == bits[begin + i],
               absl::StrCat("staged element ", begin + i, " differs"));
  }
}

// Whether every element the push must cover was accepted.
bool Complete(const ShardStore& store, const PushMessage& first,
              const Expected& expected) {
  for (int i = 0; i < store.num_slices(); ++i) {
    if (first.initial_values && !store.TakesValuesFromRank0(i)) continue;
    for (int times : expected.times[i]) {
      if (times != 1) return false;
    }
  }
  return true;
}

// A finished push covers every element it must exactly once, with the
// values sent, readable after every network buffer is gone.
void CheckStaged(const ShardStore& store, const PushMessage& first,
                 const StagedPush& staged, const Expected& expected) {
  FUZZ_CHECK(staged.rank == first.header.worker_rank &&
                 staged.step == first.step &&
                 staged.initial_values == first.initial_values,
             "staged metadata differs from the first message");
  FUZZ_CHECK(staged.gradients.size() == store.slices().size(),
             "one gradient per slice");
  for (int i = 0; i < store.num_slices(); ++i) {
    const uint64_t n = store.slices()[i].num_elements;
    const bool required =
        !staged.initial_values || store.TakesValuesFromRank0(i);
    for (uint64_t e = 0; e < n; ++e) {
      FUZZ_CHECK(expected.times[i][e] == (required ? 1 : 0),
                 absl::StrCat("slice ", i, " element ", e, " staged ",
                              expected.times[i][e], " times"));
    }
    const server::SliceGradient& gradient = staged.gradients[i];
    FUZZ_CHECK(gradient.num_elements() == (required ? n : 0),
               absl::StrCat("slice ", i, " holds ", gradient.num_elements()));
    if (!required) continue;
    ReadAndCompare(gradient, 0, n, expected.bits[i]);
    ReadAndCompare(gradient, n / 3, n - n / 3 - n / 4, expected.bits[i]);
  }
}

int Run(const uint8_t* input, size_t size) {
  const PushStreamInput stream = DecodePushStream(
      absl::string_view(reinterpret_cast<const char*>(input), size));
  const Shard& shard = Shards()[stream.options & 1];
  const ShardStore& store = *shard.store;
  const bool refuse_non_finite = (stream.options & 2) == 0;
  constexpr uint64_t kMinChunk[] = {1, 4, 16, 64};
  PushStager stager(&store, shard.identity,
                    kMinChunk[(stream.options >> 2) & 3], refuse_non_finite);
  Expected expected(store);
  PushMessage first;
  // Reused across messages, as the service does.
  proto::PushRequest request;
  for (const FramedMessage& framed : stream.messages) {
    absl::Cord data;
    absl::Status parsed;
    {
      grpc::ByteBuffer buffer = SlicedBuffer(framed.bytes, framed.split);
      parsed = ParseChunkMessage(buffer, kPushRequestChunk, &request, &data);
    }  // The slices are gone now; `data` must hold what it needs.
    const std::string flat(data);
    CheckAgainstProtobuf(framed.bytes, parsed, request, flat);
    if (!parsed.ok()) return 0;  // The service ends the call.
    CheckNonFiniteScan(data, flat);
    const PushMessage message = PushMessageFromProto(request, data);
    const absl::Status added = stager.Add(message);
    if (!added.ok()) {
      FUZZ_CHECK(added.code() == absl::StatusCode::kInvalidArgument ||
                     added.code() == absl::StatusCode::kFailedPrecondition,
                 added.ToString());
      FUZZ_CHECK(stager.Finish().status() == added,
                 "a refused stream stays refused");
      return 0;
    }
    if (stager.messages() == 1) {
      first = message;
      first.has_chunk = false;
      first.chunk = server::ChunkView();  // Its shape points into `request`.
    }
    if (message.has_chunk) {
      RecordAccepted(store, message, flat,
                     refuse_non_finite || message.initial_values, &expected);
    }
  }
  absl::StatusOr<StagedPush> staged = stager.Finish();
  if (!staged.ok()) {
    FUZZ_CHECK(staged.status().code() == absl::StatusCode::kInvalidArgument,
               staged.status().ToString());
    FUZZ_CHECK(
        stager.messages() == 0 || !Complete(store, first, expected),
        absl::StrCat("refused a complete push: ", staged.status().ToString()));
    return 0;
  }
  CheckStaged(store, first, *staged, expected);
  FUZZ_CHECK(!stager.Add(first).ok(), "a finished stager takes no more");
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
