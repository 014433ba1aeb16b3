// Writes the fuzzers' seed corpus: requests as our client sends them (pushes
// covering a shard, initial values, pulls, pull responses, declarations),
// plus a few that the server refuses; and pull answers as a shard streams
// them, plus a few that the client refuses. Run from the repository root:
//
//   bazel run //fuzz:make_corpus -- "$PWD/fuzz/corpus"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/chunk_wire.h"
#include "common/declaration_proto.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "common/tensor_codec.h"
#include "fuzz/fuzz_input.h"
#include "proto/parameter_server.pb.h"

namespace ps::fuzz {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) std::abort();
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return bytes;
}

void Write(const std::string& dir, const std::string& name,
           const std::string& bytes) {
  std::filesystem::create_directories(dir);
  const std::string path = absl::StrCat(dir, "/", name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// How one push is made.
struct PushPlan {
  int server = 0;
  int rank = 1;
  uint64_t chunk = 64;  // Elements per message.
  bool initial_values = false;
  bool reversed = false;
  bool header_first = false;  // A message without a chunk first.
  std::function<float(uint32_t tensor, uint64_t element)> value =
      [](uint32_t t, uint64_t e) { return 0.001f * t - 0.0001f * e; };
};

// The push messages' bytes, as the client serializes them.
std::vector<std::string> PushMessages(const Partition& partition,
                                      const PushPlan& plan) {
  const ModelSpec& model = partition.model();
  proto::PushRequest head;
  proto::RequestHeader* h = head.mutable_header();
  h->set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h->set_partition_fingerprint(partition.fingerprint());
  h->set_worker_rank(plan.rank);
  h->set_server_index(plan.server);
  h->set_incarnation(0x5eed0000 + plan.rank);
  h->set_job_id(kJobId);
  if (!plan.initial_values) {
    head.set_step(5);
    head.set_base_version(4);
    head.set_num_examples(32);
    head.set_epoch(1);
    head.set_examples_done(192);
  }
  head.set_initial_values(plan.initial_values);
  std::vector<std::string> out;
  if (plan.header_first) out.push_back(head.SerializeAsString());
  for (const Slice& s : partition.SlicesOfServer(plan.server)) {
    const TensorSpec& spec = model.tensors[s.tensor_id];
    const bool from_rank0 =
        spec.initializer.kind == InitializerSpec::Kind::kFromRank0;
    if (plan.initial_values && !from_rank0) continue;
    for (uint64_t b = 0; b < s.num_elements; b += plan.chunk) {
      const uint64_t n = std::min(plan.chunk, s.num_elements - b);
      proto::TensorChunk chunk;
      chunk.set_tensor_id(s.tensor_id);
      chunk.set_dtype(proto::DTYPE_FLOAT32);
      chunk.mutable_shape()->Assign(spec.shape.begin(), spec.shape.end());
      chunk.set_offset(s.offset + b);
      chunk.set_num_elements(n);
      std::vector<float> values(n);
      for (uint64_t i = 0; i < n; ++i) {
        values[i] = plan.value(s.tensor_id, s.offset + b + i);
      }
      std::string bytes;
      EncodeFloats(values, &bytes);
      out.push_back(Flatten(SerializeChunkMessage(
          head, chunk, kPushRequestChunk, OwnedSlice(std::move(bytes)))));
    }
  }
  if (plan.reversed) std::reverse(out.begin(), out.end());
  return out;
}

std::string PushStream(uint8_t options, const std::vector<std::string>& msgs,
                       uint8_t split) {
  PushStreamInput stream;
  stream.options = options;
  for (size_t i = 0; i < msgs.size(); ++i) {
    // Vary the cuts from message to message (0 stays one slice).
    uint8_t s = split == 0 ? 0 : static_cast<uint8_t>(split + 7 * i);
    if (split != 0 && s == 0) s = 1;
    stream.messages.push_back({s, msgs[i]});
  }
  return EncodePushStream(stream);
}

void WritePushStreams(const std::string& dir, const Partition& partition) {
  PushPlan plan;
  Write(dir, "push_server0_chunk64",
        PushStream(0, PushMessages(partition, plan), 0));
  plan.server = 1;
  plan.rank = 2;
  plan.chunk = 7;
  plan.reversed = true;
  Write(dir, "push_server1_chunk7_reversed",
        PushStream(1, PushMessages(partition, plan), 23));
  plan = PushPlan();
  plan.server = 1;
  plan.chunk = 1000;
  plan.header_first = true;
  Write(dir, "push_server1_whole_slices_header_first",
        PushStream(1, PushMessages(partition, plan), 0x85));
  for (int server = 0; server < kNumServers; ++server) {
    plan = PushPlan();
    plan.server = server;
    plan.rank = 0;
    plan.initial_values = true;
    plan.header_first = true;  // The server may own no such tensor.
    plan.chunk = 8;
    Write(dir, absl::StrCat("initial_values_server", server),
          PushStream(server, PushMessages(partition, plan), 40));
  }
  // Minimum chunk 16 (options bits 2-3 = 2).
  plan = PushPlan();
  plan.chunk = 16;
  Write(dir, "push_server0_min_chunk16",
        PushStream(2 << 2, PushMessages(partition, plan), 3));
  // A NaN: refused by default, taken with non-finite values let through.
  plan = PushPlan();
  plan.value = [](uint32_t t, uint64_t e) {
    return t == 0 && e == 37 ? std::nanf("") : 0.5f;
  };
  Write(dir, "push_server0_nan_refused",
        PushStream(0, PushMessages(partition, plan), 9));
  Write(dir, "push_server0_nan_passes",
        PushStream(2, PushMessages(partition, plan), 9));
  // Refused: one message short, one message twice.
  plan = PushPlan();
  std::vector<std::string> msgs = PushMessages(partition, plan);
  msgs.pop_back();
  Write(dir, "push_server0_incomplete", PushStream(0, msgs, 17));
  msgs = PushMessages(partition, plan);
  msgs.push_back(msgs[1]);
  Write(dir, "push_server0_duplicate_chunk", PushStream(0, msgs, 17));
}

// A shard's answer to a pull, as the server streams it: its slices in
// order, as chunks of at most `chunk` elements.
std::vector<std::string> PullAnswer(const Partition& partition, int server,
                                    uint64_t chunk) {
  const ModelSpec& model = partition.model();
  proto::PullResponse head;
  head.set_version(23);
  std::vector<std::string> out;
  for (const Slice& s : partition.SlicesOfServer(server)) {
    const TensorSpec& spec = model.tensors[s.tensor_id];
    for (uint64_t b = 0; b < s.num_elements; b += chunk) {
      const uint64_t n = std::min(chunk, s.num_elements - b);
      proto::TensorChunk c;
      c.set_tensor_id(s.tensor_id);
      c.set_dtype(proto::DTYPE_FLOAT32);
      c.mutable_shape()->Assign(spec.shape.begin(), spec.shape.end());
      c.set_offset(s.offset + b);
      c.set_num_elements(n);
      std::vector<float> values(n);
      for (uint64_t i = 0; i < n; ++i) {
        values[i] = 0.25f * s.tensor_id - 0.001f * (s.offset + b + i);
      }
      std::string bytes;
      EncodeFloats(values, &bytes);
      out.push_back(Flatten(SerializeChunkMessage(
          head, c, kPullResponseChunk, OwnedSlice(std::move(bytes)))));
    }
  }
  return out;
}

// Pull answers, in the push streams' framing (options bit 0: the server).
void WritePullAnswers(const std::string& dir, const Partition& partition) {
  for (int server = 0; server < kNumServers; ++server) {
    Write(dir, absl::StrCat("server", server, "_chunk64"),
          PushStream(server, PullAnswer(partition, server, 64), 0));
  }
  Write(dir, "server1_chunk7_sliced",
        PushStream(1, PullAnswer(partition, 1, 7), 23));
  Write(dir, "server0_whole_slices",
        PushStream(0, PullAnswer(partition, 0, 1000), 0x85));
  // Refused: one chunk short, one chunk twice, two chunks swapped.
  std::vector<std::string> msgs = PullAnswer(partition, 0, 50);
  msgs.pop_back();
  Write(dir, "server0_short", PushStream(0, msgs, 17));
  msgs = PullAnswer(partition, 1, 50);
  msgs.push_back(msgs.back());
  Write(dir, "server1_chunk_twice", PushStream(1, msgs, 17));
  msgs = PullAnswer(partition, 0, 50);
  std::swap(msgs[0], msgs[1]);
  Write(dir, "server0_swapped", PushStream(0, msgs, 9));
}

proto::ModelDeclaration Declaration(const ModelSpec& model) {
  proto::ModelDeclaration d;
  ModelSpecToProto(model, &d);
  return d;
}

ModelSpec EveryInitializer() {
  ModelSpec model;
  model.seed = 1234;
  auto add = [&](std::string name, std::vector<int64_t> shape,
                 InitializerSpec init) {
    TensorSpec t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.initializer = init;
    model.tensors.push_back(std::move(t));
  };
  add("conv0.weight", {8, 3, 3, 3}, InitializerSpec::GlorotUniform(27, 72));
  add("conv0.bias", {8}, InitializerSpec::Zeros());
  add("norm.scale", {8}, InitializerSpec::Constant(1.0));
  add("embed", {100, 16}, InitializerSpec::Normal(0.0, 0.02));
  add("head", {16, 4}, InitializerSpec::Uniform(-0.1, 0.1));
  add("temperature", {}, InitializerSpec::FromRank0());
  model.tensors.back().weight_decay = false;
  return model;
}

void WriteDeclarations(const std::string& dir) {
  Write(dir, "mlp_784_256_128_10",
        Declaration(MlpModelSpec({784, 256, 128, 10})).SerializeAsString());
  Write(dir, "push_model", Declaration(PushModel()).SerializeAsString());
  Write(dir, "every_initializer",
        Declaration(EveryInitializer()).SerializeAsString());
}

void WriteChunkWire(const std::string& dir, const Partition& partition) {
  auto framed = [](uint8_t kind, uint8_t split, const std::string& bytes) {
    return absl::StrCat(std::string(1, static_cast<char>(kind)),
                        std::string(1, static_cast<char>(split)), bytes);
  };
  PushPlan plan;
  plan.chunk = 50;
  std::vector<std::string> pushes = PushMessages(partition, plan);
  Write(dir, "push_request", framed(0, 11, pushes[0]));
  Write(dir, "push_request_one_slice", framed(0, 0, pushes[1]));
  plan.initial_values = true;
  plan.rank = 0;
  Write(dir, "push_request_initial_values",
        framed(0, 0x90, PushMessages(partition, plan)[0]));

  // A pull response as the server streams it.
  proto::PullResponse head;
  head.set_version(17);
  proto::TensorChunk chunk;
  chunk.set_tensor_id(0);
  chunk.set_dtype(proto::DTYPE_FLOAT32);
  chunk.add_shape(20);
  chunk.add_shape(30);
  chunk.set_offset(100);
  chunk.set_num_elements(40);
  std::vector<float> values(40);
  for (int i = 0; i < 40; ++i) values[i] = 0.01f * i;
  std::string bytes;
  EncodeFloats(values, &bytes);
  const std::string pull_response = Flatten(SerializeChunkMessage(
      head, chunk, kPullResponseChunk, OwnedSlice(bytes)));
  Write(dir, "pull_response", framed(1, 5, pull_response));
  Write(dir, "pull_response_big_slices", framed(1, 0xa0, pull_response));

  proto::PullRequest pull;
  proto::RequestHeader* h = pull.mutable_header();
  h->set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h->set_partition_fingerprint(partition.fingerprint());
  h->set_worker_rank(1);
  h->set_incarnation(99);
  h->set_job_id(kJobId);
  pull.set_clock(5);
  pull.set_max_chunk_elements(262144);
  Write(dir, "pull_request", framed(2, 4, pull.SerializeAsString()));
  pull.set_after_others_finish(true);
  Write(dir, "pull_request_final", framed(2, 0, pull.SerializeAsString()));

  proto::RegisterRequest reg;
  *reg.mutable_header() = pull.header();
  *reg.mutable_declaration() = Declaration(PushModel());
  reg.set_incarnation(99);
  reg.set_planned_steps(18750);
  Write(dir, "register_request", framed(3, 21, reg.SerializeAsString()));
}

// Serialized RegisterRequests as a server receives them: rank 0 declaring,
// another rank without a declaration, and a header given twice (merged).
void WriteRegisters(const std::string& dir, const Partition& partition) {
  proto::RegisterRequest reg;
  proto::RequestHeader* h = reg.mutable_header();
  h->set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h->set_partition_fingerprint(partition.fingerprint());
  h->set_worker_rank(0);
  h->set_incarnation(7);
  h->set_job_id(kJobId);
  *reg.mutable_declaration() = Declaration(PushModel());
  reg.set_incarnation(7);
  reg.set_planned_steps(100);
  Write(dir, "rank0_declares", reg.SerializeAsString());
  reg.clear_declaration();
  reg.mutable_header()->set_worker_rank(1);
  Write(dir, "rank1", reg.SerializeAsString());
  proto::RegisterRequest second;
  second.mutable_header()->set_job_id("another-job");
  Write(dir, "header_twice",
        reg.SerializeAsString() + second.SerializeAsString());
}

}  // namespace
}  // namespace ps::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus CORPUS_DIR\n");
    return 2;
  }
  const std::string root = argv[1];
  absl::StatusOr<ps::Partition> partition =
      ps::Partition::Create(ps::fuzz::PushModel(), ps::fuzz::kNumServers);
  if (!partition.ok()) return 1;
  ps::fuzz::WritePushStreams(root + "/push_stream", *partition);
  ps::fuzz::WriteChunkWire(root + "/chunk_wire", *partition);
  ps::fuzz::WriteDeclarations(root + "/declaration");
  ps::fuzz::WritePullAnswers(root + "/pull_reader", *partition);
  ps::fuzz::WriteRegisters(root + "/register_precheck", *partition);
  return 0;
}
