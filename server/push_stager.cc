#include "server/push_stager.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps::server {
namespace {

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

PushStager::PushStager(const update::ShardStore* store,
                       const ShardIdentity& identity,
                       uint64_t min_chunk_elements, bool refuse_non_finite)
    : store_(store),
      identity_(identity),
      min_chunk_elements_(min_chunk_elements),
      refuse_non_finite_(refuse_non_finite),
      covered_(store->num_slices()),
      covered_elements_(store->num_slices(), 0) {}

absl::Status PushStager::Add(const PushMessage& message) {
  if (!error_.ok()) return error_;
  absl::Status status = ValidateRequestHeader(message.header, identity_);
  if (status.ok() && messages_ == 0) {
    status = message.initial_values ? CheckInitialValuesMetadata(message)
                                    : CheckProgress(message);
    if (status.ok()) {
      first_ = message;
      first_.chunk = ChunkView();
      gradients_.resize(store_->num_slices());
    }
  } else if (status.ok()) {
    status = CheckSameMetadata(message);
  }
  if (status.ok() && message.has_chunk) status = AddChunk(message.chunk);
  if (!status.ok()) {
    error_ = absl::Status(
        status.code(),
        absl::StrCat("push message ", messages_, ": ", status.message()));
    gradients_.clear();  // Lets go of the network buffers now.
    return error_;
  }
  ++messages_;
  return absl::OkStatus();
}

absl::Status PushStager::CheckProgress(const PushMessage& m) {
  if (m.examples_done < m.num_examples) {
    return absl::InvalidArgumentError(absl::StrCat(
        "examples_done ", m.examples_done, " is below num_examples ",
        m.num_examples, ": the progress after a batch counts the batch"));
  }
  if (m.learning_rate.has_value() &&
      !(std::isfinite(*m.learning_rate) && *m.learning_rate >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "learning_rate ", *m.learning_rate, " is not finite and >= 0"));
  }
  return absl::OkStatus();
}

absl::Status PushStager::CheckInitialValuesMetadata(const PushMessage& m) {
  if (m.header.worker_rank != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initial values come from rank 0, not rank ", m.header.worker_rank));
  }
  if (m.step != 0 || m.base_version != 0 || m.num_examples != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initial values carry step, base_version and num_examples 0, got ",
        m.step, ", ", m.base_version, " and ", m.num_examples));
  }
  return absl::OkStatus();
}

absl::Status PushStager::CheckSameMetadata(const PushMessage& m) const {
  auto changed = [](absl::string_view field, auto was, auto now) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " changed within the push stream from ", was, " to ", now));
  };
  if (m.header.worker_rank != first_.header.worker_rank) {
    return changed("worker_rank", first_.header.worker_rank,
                   m.header.worker_rank);
  }
  if (m.header != first_.header) {
    return absl::InvalidArgumentError(
        "request header changed within the push stream");
  }
  if (m.initial_values != first_.initial_values) {
    return changed("initial_values", first_.initial_values, m.initial_values);
  }
  if (m.step != first_.step) return changed("step", first_.step, m.step);
  if (m.base_version != first_.base_version) {
    return changed("base_version", first_.base_version, m.base_version);
  }
  if (m.num_examples != first_.num_examples) {
    return changed("num_examples", first_.num_examples, m.num_examples);
  }
  if (m.epoch != first_.epoch) return changed("epoch", first_.epoch, m.epoch);
  if (m.examples_done != first_.examples_done) {
    return changed("examples_done", first_.examples_done, m.examples_done);
  }
  return absl::OkStatus();
}

absl::Status PushStager::AddChunk(const ChunkView& c) {
  const ModelSpec& model = store_->partition().model();
  if (c.tensor_id >= model.tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor id ", c.tensor_id, " is not below the model's ",
                     model.tensors.size(), " tensors"));
  }
  const TensorSpec& spec = model.tensors[c.tensor_id];
  if (c.dtype != kDTypeFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", c.tensor_id, " chunk has dtype ", c.dtype,
        "; only DTYPE_FLOAT32 (", kDTypeFloat32, ") is supported"));
  }
  if (!std::equal(c.shape.begin(), c.shape.end(), spec.shape.begin(),
                  spec.shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", c.tensor_id, " chunk has shape ", ShapeString(c.shape),
        " but ", spec.name, " has shape ", ShapeString(spec.shape)));
  }
  // Saturating, so that a hostile range is still named sensibly.
  const uint64_t range_end = c.offset + c.num_elements < c.offset
                                 ? UINT64_MAX
                                 : c.offset + c.num_elements;
  const std::string range = absl::StrCat("tensor ", c.tensor_id, " chunk [",
                                         c.offset, ", ", range_end, ")");
  if (c.num_elements == 0) {
    return absl::InvalidArgumentError(absl::StrCat(range, " is empty"));
  }
  const int slice = store_->FindSlice(c.tensor_id, c.offset, c.num_elements);
  if (slice < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(range, " is outside this server's slices (server ",
                     identity_.server_index, ")"));
  }
  if (first_.initial_values && !store_->TakesValuesFromRank0(slice)) {
    return absl::InvalidArgumentError(
        absl::StrCat(range,
                     ": initial values are taken only for tensors declared "
                     "from_rank0; ",
                     spec.name, " is declared ",
                     InitializerKindName(spec.initializer.kind)));
  }
  // n is now at most a slice's size, so n * 4 cannot overflow.
  if (c.data.size() != c.num_elements * sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat(range, " carries ", c.data.size(), " bytes, expected ",
                     c.num_elements * sizeof(float)));
  }
  const uint64_t begin = c.offset - store_->slices()[slice].offset;
  const uint64_t end = begin + c.num_elements;
  if (c.num_elements < min_chunk_elements_ &&
      end != store_->slices()[slice].num_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        range, " holds ", c.num_elements, " elements; chunks hold at least ",
        min_chunk_elements_, " but for the last of a slice"));
  }
  std::map<uint64_t, uint64_t>& covered = covered_[slice];
  auto next = covered.lower_bound(begin);
  const bool overlaps_next = next != covered.end() && next->first < end;
  const bool overlaps_prev =
      next != covered.begin() && std::prev(next)->second > begin;
  if (overlaps_next || overlaps_prev) {
    return absl::InvalidArgumentError(
        absl::StrCat(range, " overlaps elements already sent in this push"));
  }
  // One NaN or infinity would make every weight it reaches non-finite for
  // good: the whole push is refused, and the worker told where.
  if (const uint64_t bad = refuse_non_finite_ || first_.initial_values
                               ? FirstNonFinite(c.data)
                               : c.num_elements;
      bad < c.num_elements) {
    float value = 0;
    if (absl::Status s = DecodeFloatsAt(c.data, bad, absl::MakeSpan(&value, 1));
        !s.ok()) {
      return s;
    }
    if (first_.initial_values) {
      return absl::InvalidArgumentError(
          absl::StrCat("initial value of ", spec.name, " (tensor ", c.tensor_id,
                       ") element ", c.offset + bad, " is ", value,
                       ": initial values must be finite"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient of ", spec.name, " (tensor ", c.tensor_id, ") element ",
        c.offset + bad, " is ", value,
        ": non-finite gradients are refused (did training diverge?)"));
  }
  gradients_[slice].Add(begin, c.data);
  covered.emplace_hint(next, begin, end);
  covered_elements_[slice] += c.num_elements;
  return absl::OkStatus();
}

absl::StatusOr<StagedPush> PushStager::Finish() {
  if (!error_.ok()) return error_;
  if (messages_ == 0) {
    error_ = absl::InvalidArgumentError(
        "push stream carried no messages; even a shard that owns no elements "
        "needs one message with the header and step");
    return error_;
  }
  for (int i = 0; i < store_->num_slices(); ++i) {
    const Slice& s = store_->slices()[i];
    if (covered_elements_[i] == s.num_elements) continue;
    // Initial values cover the from_rank0 tensors alone.
    if (first_.initial_values && !store_->TakesValuesFromRank0(i)) continue;
    // Name the first gap.
    uint64_t gap = 0;
    for (const auto& [b, e] : covered_[i]) {
      if (b != gap) break;
      gap = e;
    }
    error_ = absl::InvalidArgumentError(
        absl::StrCat(first_.initial_values ? "initial values are incomplete: "
                                           : "push is incomplete: ",
                     "tensor ", s.tensor_id, " slice [", s.offset, ", ",
                     s.offset + s.num_elements, ") got ", covered_elements_[i],
                     " of ", s.num_elements,
                     " elements; first missing element is ", s.offset + gap));
    gradients_.clear();
    return error_;
  }
  StagedPush staged;
  staged.rank = first_.header.worker_rank;
  staged.incarnation = first_.header.incarnation;
  staged.step = first_.step;
  staged.base_version = first_.base_version;
  staged.num_examples = first_.num_examples;
  staged.epoch = first_.epoch;
  staged.examples_done = first_.examples_done;
  staged.learning_rate = first_.learning_rate;
  staged.initial_values = first_.initial_values;
  staged.gradients = std::move(gradients_);
  gradients_.clear();
  error_ = absl::FailedPreconditionError("push already finished");
  return std::move(staged);
}

}  // namespace ps::server
