#include "allreduce/gloo_group.h"

#include <exception>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "gloo/allreduce.h"
#include "gloo/broadcast.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/types.h"

namespace ps::allreduce {

absl::StatusOr<std::unique_ptr<GlooGroup>> GlooGroup::Connect(
    const GroupOptions& options, gloo::rendezvous::Store& store) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " of a group of ", options.size));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    std::shared_ptr<gloo::transport::Device> device =
        gloo::transport::tcp::CreateDevice(attr);
    auto context =
        std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(absl::ToChronoMilliseconds(options.timeout));
    context->connectFullMesh(store, device);
    return absl::WrapUnique(
        new GlooGroup(options.rank, options.size, std::move(context)));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("forming the ring (rank ",
                                               options.rank, " of ",
                                               options.size, "): ", e.what()));
  }
}

GlooGroup::GlooGroup(int rank, int size, std::shared_ptr<gloo::Context> context)
    : rank_(rank), size_(size), context_(std::move(context)) {}

absl::Status GlooGroup::AllreduceSum(absl::Span<float> data, uint32_t tag) {
  if (size_ == 1 || data.empty()) return absl::OkStatus();
  try {
    gloo::AllreduceOptions options(context_);
    options.setOutput(data.data(), data.size());
    options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    options.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(
            &gloo::sum<float>));
    options.setTag(tag);
    gloo::allreduce(options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("all-reduce (rank ", rank_,
                                               " of ", size_, "): ", e.what()));
  }
  return absl::OkStatus();
}

namespace {

// Gloo's reduce function for binary16: each element's sum in float32,
// rounded once to binary16 with our RNE (not Gloo's, whose rounding of ties
// we have not checked).
void ReduceHalves(void* c, const void* a, const void* b, size_t n) {
  SumHalvesInFloat(static_cast<const uint16_t*>(a),
                   static_cast<const uint16_t*>(b), static_cast<uint16_t*>(c),
                   n);
}

}  // namespace

absl::Status GlooGroup::AllreduceSumHalf(absl::Span<uint16_t> data,
                                         uint32_t tag) {
  if (size_ == 1 || data.empty()) return absl::OkStatus();
  try {
    gloo::AllreduceOptions options(context_);
    // Gloo's float16 is a 2-byte struct of the same bits.
    static_assert(sizeof(gloo::float16) == sizeof(uint16_t));
    options.setOutput(reinterpret_cast<gloo::float16*>(data.data()),
                      data.size());
    options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    options.setReduceFunction(&ReduceHalves);
    options.setTag(tag);
    gloo::allreduce(options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("fp16 all-reduce (rank ", rank_,
                                               " of ", size_, "): ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status GlooGroup::ReduceBucket(absl::Span<float> bucket,
                                     Compression compression, uint32_t tag) {
  if (compression == Compression::kNone) return AllreduceSum(bucket, tag);
  halves_.resize(bucket.size());
  FloatsToHalves(bucket, absl::MakeSpan(halves_));
  if (absl::Status s = AllreduceSumHalf(absl::MakeSpan(halves_), tag);
      !s.ok()) {
    return s;
  }
  HalvesToFloats(halves_, bucket);
  return absl::OkStatus();
}

absl::Status GlooGroup::Broadcast(absl::Span<char> data, int root,
                                  uint32_t tag) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " of a group of ", size_));
  }
  if (size_ == 1 || data.empty()) return absl::OkStatus();
  try {
    gloo::BroadcastOptions options(context_);
    options.setOutput(data.data(), data.size());
    options.setRoot(root);
    options.setTag(tag);
    gloo::broadcast(options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("broadcast (rank ", rank_,
                                               " of ", size_, "): ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace ps::allreduce
