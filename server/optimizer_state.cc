#include "server/optimizer_state.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/tensor_codec.h"

namespace ps::server {
namespace {

const char* KindName(proto::OptimizerDeclaration::Kind kind) {
  switch (kind) {
    case proto::OptimizerDeclaration::SGD:
      return "sgd";
    case proto::OptimizerDeclaration::ADAM:
      return "adam";
    default:
      return "an unspecified optimizer";
  }
}

// The state vectors slice `i`'s optimizer keeps (update/optimizer.h);
// ShardStore::RestoreOptimizerState checks them again against the
// optimizer itself.
std::vector<std::string> VectorsOf(const update::ShardStore& store, int i) {
  const TensorSpec& tensor =
      store.partition().model().tensors[store.slices()[i].tensor_id];
  if (tensor.assigned) return {};
  if (store.optimizer().kind == OptimizerKind::kAdam) return {"m", "v"};
  if (store.optimizer().momentum > 0.0f) return {"momentum"};
  return {};
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

proto::OptimizerDeclaration::Kind OptimizerKindOf(
    const update::ShardStore& store) {
  return store.optimizer().kind == OptimizerKind::kAdam
             ? proto::OptimizerDeclaration::ADAM
             : proto::OptimizerDeclaration::SGD;
}

proto::OptimizerStateHeader DescribeOptimizerState(
    const update::ShardStore& store, uint64_t version,
    const std::vector<update::SliceSnapshot>& slices) {
  proto::OptimizerStateHeader header;
  header.set_format(proto::OPTIMIZER_STATE_FORMAT_CURRENT);
  header.set_kind(OptimizerKindOf(store));
  header.set_version(version);
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& slice = store.slices()[i];
    const TensorSpec& tensor =
        store.partition().model().tensors[slice.tensor_id];
    proto::OptimizerSliceState* out = header.add_slices();
    out->set_tensor(tensor.name);
    for (int64_t d : tensor.shape) out->add_shape(d);
    out->set_offset(slice.offset);
    out->set_num_elements(slice.num_elements);
    out->set_update_count(slices[i].update_count);
    for (const auto& [name, values] : slices[i].state) out->add_vectors(name);
  }
  return header;
}

OptimizerStateAssembly::OptimizerStateAssembly(
    std::vector<update::SliceSnapshot> slices, std::vector<std::string> names)
    : slices_(std::move(slices)), names_(std::move(names)) {
  for (const update::SliceSnapshot& slice : slices_) {
    filled_.emplace_back(slice.state.size(), 0);
  }
}

absl::StatusOr<OptimizerStateAssembly> OptimizerStateAssembly::Start(
    const update::ShardStore& store,
    const proto::OptimizerStateHeader& header) {
  if (header.format() != proto::OPTIMIZER_STATE_FORMAT_CURRENT) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer state of format ", header.format(), ", this shard reads ",
        proto::OPTIMIZER_STATE_FORMAT_CURRENT));
  }
  const proto::OptimizerDeclaration::Kind kind = OptimizerKindOf(store);
  if (header.kind() != kind) {
    return absl::FailedPreconditionError(
        absl::StrCat("optimizer state of ", KindName(header.kind()),
                     ", but this shard runs ", KindName(kind)));
  }
  const ModelSpec& model = store.partition().model();
  std::vector<update::SliceSnapshot> slices;
  std::vector<std::string> names;
  for (int i = 0; i < header.slices_size(); ++i) {
    const proto::OptimizerSliceState& in = header.slices(i);
    const int id = model.FindTensor(in.tensor());
    if (id < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("optimizer state of tensor \"", in.tensor(),
                       "\", which the declared model does not have"));
    }
    const std::vector<int64_t> shape(in.shape().begin(), in.shape().end());
    if (shape != model.tensors[id].shape) {
      return absl::FailedPreconditionError(absl::StrCat(
          "optimizer state of tensor \"", in.tensor(), "\" of shape ",
          ShapeText(shape), ", declared ", ShapeText(model.tensors[id].shape)));
    }
    if (i >= store.num_slices()) {
      return absl::FailedPreconditionError(
          absl::StrCat("optimizer state of ", header.slices_size(),
                       " slices, this shard holds ", store.num_slices()));
    }
    const Slice& own = store.slices()[i];
    if (static_cast<uint32_t>(id) != own.tensor_id ||
        in.offset() != own.offset || in.num_elements() != own.num_elements) {
      return absl::FailedPreconditionError(
          absl::StrCat("optimizer state's slice ", i, " is elements [",
                       in.offset(), ", ", in.offset() + in.num_elements(),
                       ") of \"", in.tensor(), "\"; this shard's is [",
                       own.offset, ", ", own.offset + own.num_elements,
                       ") of \"", model.tensors[own.tensor_id].name,
                       "\" (another partition: another number of servers?)"));
    }
    const std::vector<std::string> vectors(in.vectors().begin(),
                                           in.vectors().end());
    const std::vector<std::string> expected = VectorsOf(store, i);
    if (vectors != expected) {
      return absl::FailedPreconditionError(absl::StrCat(
          "optimizer state of \"", in.tensor(), "\" holds [",
          absl::StrJoin(vectors, ", "), "], this shard's optimizer keeps [",
          absl::StrJoin(expected, ", "), "]"));
    }
    update::SliceSnapshot slice;
    slice.update_count = in.update_count();
    for (const std::string& name : vectors) {
      slice.state.emplace_back(name, std::vector<float>(own.num_elements));
    }
    slices.push_back(std::move(slice));
    names.push_back(in.tensor());
  }
  if (header.slices_size() != store.num_slices()) {
    return absl::FailedPreconditionError(
        absl::StrCat("optimizer state of ", header.slices_size(),
                     " slices, this shard holds ", store.num_slices()));
  }
  return OptimizerStateAssembly(std::move(slices), std::move(names));
}

absl::Status OptimizerStateAssembly::Add(
    const proto::OptimizerStateChunk& chunk) {
  if (chunk.slice() >= slices_.size() ||
      chunk.vector() >= slices_[chunk.slice()].state.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state chunk of slice ", chunk.slice(),
                     " vector ", chunk.vector(), ", which the header lacks"));
  }
  auto& [name, values] = slices_[chunk.slice()].state[chunk.vector()];
  uint64_t& filled = filled_[chunk.slice()][chunk.vector()];
  const std::string where =
      absl::StrCat("optimizer state of \"", names_[chunk.slice()], "\" ", name);
  if (chunk.data().size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a chunk of ", chunk.data().size(),
                     " bytes, not whole float32 values"));
  }
  const uint64_t n = chunk.data().size() / sizeof(float);
  if (chunk.offset() != filled || n > values.size() - filled) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a chunk of elements [", chunk.offset(), ", ",
                     chunk.offset() + n, ") where [", filled, ", ...) of ",
                     values.size(), " comes next"));
  }
  if (absl::Status s =
          DecodeFloats(chunk.data(), absl::MakeSpan(values).subspan(filled, n));
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
  }
  filled += n;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<update::SliceSnapshot>>
OptimizerStateAssembly::Finish() && {
  for (size_t i = 0; i < slices_.size(); ++i) {
    for (size_t v = 0; v < slices_[i].state.size(); ++v) {
      if (filled_[i][v] != slices_[i].state[v].second.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("optimizer state of \"", names_[i], "\" ",
                         slices_[i].state[v].first, ": ", filled_[i][v], " of ",
                         slices_[i].state[v].second.size(), " elements came"));
      }
    }
  }
  return std::move(slices_);
}

}  // namespace ps::server
