#include "server/collective_combine.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps::server {
namespace {

const char* OpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kNone:
      return "none";
    case CollectiveOp::kSum:
      return "sum";
    case CollectiveOp::kAverage:
      return "average";
    case CollectiveOp::kMin:
      return "min";
    case CollectiveOp::kMax:
      return "max";
  }
  return "?";
}

uint64_t Elements(absl::Span<const int64_t> shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// The dimensions that must agree between ranks: all but an allgather's
// first.
absl::Span<const int64_t> AgreedShape(const CollectiveCall& call) {
  absl::Span<const int64_t> shape(call.shape);
  if (call.kind == CollectiveKind::kAllgather && !shape.empty()) {
    shape.remove_prefix(1);
  }
  return shape;
}

// Empty if `b` is the same operation as `a` (same piece), else what
// differs.
std::string CallDifference(const CollectiveCall& a, const CollectiveCall& b) {
  if (a.kind != b.kind) {
    return absl::StrCat(KindName(b.kind), ", not ", KindName(a.kind));
  }
  if (a.op != b.op) {
    return absl::StrCat("op ", OpName(b.op), ", not ", OpName(a.op));
  }
  if (a.float32 != b.float32) {
    return absl::StrCat("dtype ", b.float32 ? "float32" : "bytes", ", not ",
                        a.float32 ? "float32" : "bytes");
  }
  if (a.kind != CollectiveKind::kBroadcastBytes &&
      AgreedShape(a) != AgreedShape(b)) {
    return absl::StrCat("shape ", ShapeText(b.shape), ", not ",
                        ShapeText(a.shape));
  }
  if ((a.kind == CollectiveKind::kBroadcast ||
       a.kind == CollectiveKind::kBroadcastBytes) &&
      a.root_rank != b.root_rank) {
    return absl::StrCat("root rank ", b.root_rank, ", not ", a.root_rank);
  }
  if (a.kind != CollectiveKind::kAllgather &&
      a.kind != CollectiveKind::kBroadcastBytes &&
      (a.part != b.part || a.num_parts != b.num_parts || a.offset != b.offset ||
       a.num_elements != b.num_elements)) {
    return absl::StrCat("piece ", b.part, "/", b.num_parts, " [", b.offset,
                        ", +", b.num_elements, "), not ", a.part, "/",
                        a.num_parts, " [", a.offset, ", +", a.num_elements,
                        ")");
  }
  return "";
}

void Reduce(CollectiveOp op, const char* in, float* acc, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, in + i * sizeof(float), sizeof(float));
    switch (op) {
      case CollectiveOp::kSum:
      case CollectiveOp::kAverage:
        acc[i] += v;
        break;
      case CollectiveOp::kMin:
        acc[i] = std::min(acc[i], v);
        break;
      case CollectiveOp::kMax:
        acc[i] = std::max(acc[i], v);
        break;
      case CollectiveOp::kNone:
        break;
    }
  }
}

CollectiveResult Allreduce(absl::Span<const CollectiveCall* const> by_rank,
                           const CollectiveCall& first) {
  const uint64_t n = first.num_elements;
  std::vector<float> acc(n, 0.0f);
  bool started = false;
  for (const CollectiveCall* call : by_rank) {
    if (call == nullptr) continue;  // Joined: zeros, or skipped by min/max.
    if (!started) {
      std::memcpy(acc.data(), call->data.data(), n * sizeof(float));
      started = true;
    } else {
      Reduce(first.op, call->data.data(), acc.data(), n);
    }
  }
  if (first.op == CollectiveOp::kAverage) {
    const float ranks = static_cast<float>(by_rank.size());
    for (float& v : acc) v /= ranks;
  }
  CollectiveResult result;
  result.data.assign(reinterpret_cast<const char*>(acc.data()),
                     n * sizeof(float));
  return result;
}

CollectiveResult Allgather(absl::Span<const CollectiveCall* const> by_rank) {
  CollectiveResult result;
  for (const CollectiveCall* call : by_rank) {
    if (call == nullptr) {
      result.first_dims.push_back(0);
      continue;
    }
    result.first_dims.push_back(call->shape[0]);
    result.data.append(call->data);
  }
  return result;
}

}  // namespace

const char* KindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce:
      return "allreduce";
    case CollectiveKind::kAllgather:
      return "allgather";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kBroadcastBytes:
      return "broadcast of bytes";
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kJoin:
      return "join";
  }
  return "?";
}

std::string ShapeText(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::Status CheckCall(const CollectiveCall& call, int num_ranks) {
  const bool reduces = call.kind == CollectiveKind::kAllreduce;
  if (reduces != (call.op != CollectiveOp::kNone)) {
    return absl::InvalidArgumentError(
        reduces ? "an allreduce needs an op (sum, average, min, max)"
                : absl::StrCat("a ", KindName(call.kind), " takes no op"));
  }
  if ((call.kind == CollectiveKind::kBroadcast ||
       call.kind == CollectiveKind::kBroadcastBytes) &&
      (call.root_rank < 0 || call.root_rank >= num_ranks)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown root rank ", call.root_rank, ": the job has ",
                     num_ranks, " ranks"));
  }
  if (call.kind == CollectiveKind::kBroadcastBytes) {
    if (call.float32) {
      return absl::InvalidArgumentError("a broadcast of bytes has no dtype");
    }
    return absl::OkStatus();
  }
  if (call.kind == CollectiveKind::kBarrier ||
      call.kind == CollectiveKind::kJoin) {
    return call.data.empty() ? absl::OkStatus()
                             : absl::InvalidArgumentError(absl::StrCat(
                                   "a ", KindName(call.kind), " has no data"));
  }
  if (!call.float32) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", KindName(call.kind), " takes float32 only"));
  }
  for (int64_t d : call.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeText(call.shape)));
    }
  }
  const uint64_t total = Elements(call.shape);
  if (call.kind == CollectiveKind::kAllgather) {
    if (call.shape.empty()) {
      return absl::InvalidArgumentError(
          "an allgather needs a tensor of at least one dimension");
    }
    if (call.offset != 0 || call.num_elements != total || call.num_parts != 1) {
      return absl::InvalidArgumentError(
          "an allgather is sent whole, in one piece");
    }
  } else if (call.num_parts == 0 || call.part >= call.num_parts ||
             call.offset > total || call.num_elements > total - call.offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "piece ", call.part, "/", call.num_parts, " [", call.offset, ", +",
        call.num_elements, ") is outside shape ", ShapeText(call.shape)));
  }
  // A broadcast's other ranks send their shape only.
  const uint64_t bytes = call.num_elements * sizeof(float);
  if (call.data.size() != bytes &&
      !(call.kind == CollectiveKind::kBroadcast && call.data.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.data.size(), " bytes of data for ", call.num_elements,
                     " float32 elements"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CollectiveResult> Combine(
    absl::Span<const CollectiveCall* const> by_rank) {
  const CollectiveCall* first = nullptr;
  int first_rank = -1;
  for (int r = 0; r < static_cast<int>(by_rank.size()); ++r) {
    const CollectiveCall* call = by_rank[r];
    if (call == nullptr) continue;
    if (first == nullptr) {
      first = call;
      first_rank = r;
      continue;
    }
    if (std::string diff = CallDifference(*first, *call); !diff.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          KindName(first->kind), " '", first->name, "' #", first->sequence,
          ": rank ", r, " sends ", diff, " (rank ", first_rank, ")"));
    }
  }
  if (first == nullptr) return CollectiveResult();
  switch (first->kind) {
    case CollectiveKind::kAllreduce:
      return Allreduce(by_rank, *first);
    case CollectiveKind::kAllgather:
      return Allgather(by_rank);
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kBroadcastBytes: {
      const CollectiveCall* root = by_rank[first->root_rank];
      if (root == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat(KindName(first->kind), " '", first->name,
                         "': root rank ", first->root_rank, " has joined"));
      }
      if (first->kind == CollectiveKind::kBroadcast &&
          root->data.size() != root->num_elements * sizeof(float)) {
        return absl::InvalidArgumentError(
            absl::StrCat("broadcast '", first->name, "': root rank ",
                         first->root_rank, " sent no values"));
      }
      CollectiveResult result;
      result.data = root->data;
      return result;
    }
    case CollectiveKind::kBarrier:
    case CollectiveKind::kJoin:
      return CollectiveResult();
  }
  return CollectiveResult();
}

std::string SpecDifference(const CollectiveCall& before,
                           const CollectiveCall& now) {
  if (before.kind != now.kind) {
    return absl::StrCat(KindName(before.kind), " then ", KindName(now.kind));
  }
  if (before.op != now.op) {
    return absl::StrCat("op ", OpName(before.op), " then ", OpName(now.op));
  }
  if (now.kind != CollectiveKind::kBroadcastBytes &&
      AgreedShape(before) != AgreedShape(now)) {
    return absl::StrCat("shape ", ShapeText(before.shape), " then ",
                        ShapeText(now.shape));
  }
  return "";
}

}  // namespace ps::server
