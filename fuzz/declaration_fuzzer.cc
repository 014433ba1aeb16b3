// Fuzzes a model declaration from the network: bytes -> ModelDeclaration ->
// ModelSpecFromProto -> ValidateModelSpec (the servers' default limits). A
// declaration it accepts must round-trip through the proto, partition over
// any number of servers covering every element exactly once, and initialize
// to finite values that do not depend on where a slice starts.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/declaration_proto.h"
#include "common/initializer.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_input.h"
#include "proto/parameter_server.pb.h"

namespace ps::fuzz {
namespace {

void CheckPartition(const ModelSpec& model, int num_servers) {
  absl::StatusOr<Partition> p = Partition::Create(model, num_servers);
  FUZZ_CHECK(p.ok(), absl::StrCat("a valid declaration does not partition: ",
                                  p.status().ToString()));
  FUZZ_CHECK(p->num_tensors() == static_cast<int>(model.tensors.size()),
             "tensor count");
  uint64_t total = 0;
  for (uint32_t t = 0; t < model.tensors.size(); ++t) {
    uint64_t next = 0;  // Every element once, in order, no gap.
    for (const Slice& s : p->SlicesOfTensor(t)) {
      FUZZ_CHECK(s.tensor_id == t && s.offset == next && s.num_elements > 0 &&
                     s.server >= 0 && s.server < num_servers,
                 absl::StrCat("tensor ", t, " slice at ", s.offset));
      next += s.num_elements;
    }
    FUZZ_CHECK(next == static_cast<uint64_t>(model.tensors[t].num_elements()),
               absl::StrCat("tensor ", t, " covered ", next, " elements"));
    total += next;
  }
  uint64_t on_servers = 0;
  for (int s = 0; s < num_servers; ++s) {
    for (const Slice& slice : p->SlicesOfServer(s)) {
      FUZZ_CHECK(slice.server == s, "slice listed under another server");
    }
    on_servers += p->ElementsOnServer(s);
  }
  FUZZ_CHECK(on_servers == total, "servers hold another number of elements");
  absl::StatusOr<Partition> again = Partition::Create(model, num_servers);
  FUZZ_CHECK(again.ok() && again->fingerprint() == p->fingerprint(),
             "partition is not deterministic");
}

// Small tensors only, to bound the time an input takes.
void CheckInitialValues(const ModelSpec& model) {
  constexpr int64_t kMaxElements = 4096;
  for (uint32_t t = 0; t < model.tensors.size(); ++t) {
    const int64_t n = model.tensors[t].num_elements();
    if (n > kMaxElements) continue;
    std::vector<float> whole(n), tail(n - n / 2);
    InitializeSlice(model, t, 0, absl::MakeSpan(whole));
    InitializeSlice(model, t, n / 2, absl::MakeSpan(tail));
    const InitializerSpec& init = model.tensors[t].initializer;
    for (int64_t i = 0; i < n; ++i) {
      FUZZ_CHECK(std::isfinite(whole[i]),
                 absl::StrCat("tensor ", t, " element ", i, " is ", whole[i]));
      if (init.kind == InitializerSpec::Kind::kUniform) {
        // The bounds as float32, which the weights are.
        const float low = static_cast<float>(init.low);
        const float high = static_cast<float>(init.high);
        FUZZ_CHECK(whole[i] >= low && whole[i] < high,
                   absl::StrCat("tensor ", t, " element ", i, " is ", whole[i],
                                ", outside [", init.low, ", ", init.high, ")"));
      }
      if (i >= n / 2) {
        FUZZ_CHECK(std::memcmp(&whole[i], &tail[i - n / 2], 4) == 0,
                   "values depend on where the slice starts");
      }
    }
  }
}

int Run(const uint8_t* data, size_t size) {
  proto::ModelDeclaration declaration;
  if (!declaration.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<ModelSpec> model = ModelSpecFromProto(declaration);
  if (!model.ok()) {
    FUZZ_CHECK(model.status().code() == absl::StatusCode::kInvalidArgument,
               model.status().ToString());
    return 0;
  }
  const absl::Status valid = ValidateModelSpec(*model, DeclarationLimits());
  if (!valid.ok()) {
    FUZZ_CHECK(valid.code() == absl::StatusCode::kInvalidArgument,
               valid.ToString());
    return 0;
  }
  proto::ModelDeclaration sent;
  ModelSpecToProto(*model, &sent);
  absl::StatusOr<ModelSpec> back = ModelSpecFromProto(sent);
  FUZZ_CHECK(back.ok(), back.status().ToString());
  const absl::Status same = CompareModelSpecs(*model, "sent", *back, "read");
  FUZZ_CHECK(same.ok(), same.ToString());
  for (int servers : {1, 2, 3, 1 + static_cast<int>(size % 13)}) {
    CheckPartition(*model, servers);
  }
  CheckInitialValues(*model);
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
