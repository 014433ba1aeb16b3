#include "allreduce/bucketed_allreduce.h"

#include <utility>

#include "absl/algorithm/container.h"
#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"

namespace ps::allreduce {

BucketPlan BucketPlan::Make(absl::Span<const size_t> tensor_sizes,
                            size_t bucket_elements,
                            absl::Span<const int> exact_tensors) {
  BucketPlan plan;
  plan.places.resize(tensor_sizes.size());
  for (int t = static_cast<int>(tensor_sizes.size()) - 1; t >= 0; --t) {
    const size_t size = tensor_sizes[t];
    const bool exact = absl::c_linear_search(exact_tensors, t);
    if (plan.bucket_sizes.empty() || exact || plan.exact_bucket.back() ||
        (plan.bucket_sizes.back() > 0 &&
         plan.bucket_sizes.back() + size > bucket_elements)) {
      plan.bucket_sizes.push_back(0);
      plan.tensors_in_bucket.push_back(0);
      plan.exact_bucket.push_back(exact);
    }
    plan.places[t] = {static_cast<int>(plan.bucket_sizes.size()) - 1,
                      plan.bucket_sizes.back()};
    plan.bucket_sizes.back() += size;
    ++plan.tensors_in_bucket.back();
  }
  return plan;
}

absl::StatusOr<std::unique_ptr<BucketedAllreduce>> BucketedAllreduce::Create(
    BucketReducer* group, std::vector<size_t> tensor_sizes, size_t bucket_bytes,
    Compression compression, std::vector<int> exact_tensors) {
  if (tensor_sizes.empty()) {
    return absl::InvalidArgumentError("no tensors to all-reduce");
  }
  if (bucket_bytes < sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a bucket of ", bucket_bytes, " bytes holds no float"));
  }
  for (int t : exact_tensors) {
    if (t < 0 || t >= static_cast<int>(tensor_sizes.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "exact tensor ", t, " is not in [0, ", tensor_sizes.size(), ")"));
    }
  }
  BucketPlan plan = BucketPlan::Make(tensor_sizes, bucket_bytes / sizeof(float),
                                     exact_tensors);
  return absl::WrapUnique(new BucketedAllreduce(group, std::move(tensor_sizes),
                                                std::move(plan), compression));
}

BucketedAllreduce::BucketedAllreduce(BucketReducer* group,
                                     std::vector<size_t> tensor_sizes,
                                     BucketPlan plan, Compression compression)
    : group_(group),
      compression_(compression),
      tensor_sizes_(std::move(tensor_sizes)),
      plan_(std::move(plan)),
      added_(tensor_sizes_.size(), false),
      missing_(plan_.bucket_sizes.size(), 0) {
  for (size_t size : plan_.bucket_sizes) buckets_.emplace_back(size);
  // The thread starts with no open step: it waits in Loop.
  next_bucket_ = static_cast<int>(buckets_.size());
  thread_ = std::thread([this] { Loop(); });
}

BucketedAllreduce::~BucketedAllreduce() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

absl::Status BucketedAllreduce::Begin() {
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return error_;
  if (open_) return absl::FailedPreconditionError("a step is still open");
  open_ = true;
  std::fill(added_.begin(), added_.end(), false);
  missing_ = plan_.tensors_in_bucket;
  next_bucket_ = 0;
  return absl::OkStatus();
}

absl::Status BucketedAllreduce::Add(int tensor, absl::Span<const float> values,
                                    float scale) {
  if (tensor < 0 || tensor >= static_cast<int>(tensor_sizes_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", tensor, " is not in [0, ", tensor_sizes_.size(), ")"));
  }
  if (values.size() != tensor_sizes_[tensor]) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", tensor, " has ", tensor_sizes_[tensor],
                     " elements, not ", values.size()));
  }
  if (added_[tensor]) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", tensor, " added twice in one step"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (!open_) return absl::FailedPreconditionError("no step is open");
  }
  const BucketPlan::Place place = plan_.places[tensor];
  float* out = buckets_[place.bucket].data() + place.offset;
  for (size_t i = 0; i < values.size(); ++i) out[i] = scale * values[i];
  added_[tensor] = true;
  absl::MutexLock lock(&mu_);
  --missing_[place.bucket];
  return absl::OkStatus();
}

void BucketedAllreduce::Loop() {
  const int num_buckets = static_cast<int>(buckets_.size());
  while (true) {
    int bucket = 0;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this, num_buckets]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_ ||
               (next_bucket_ < num_buckets && missing_[next_bucket_] == 0);
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      bucket = next_bucket_;
    }
    // The tag tells concurrent operations apart on Gloo's pairs; buckets go
    // one at a time, so the bucket's index is enough.
    absl::Status status = group_->ReduceBucket(
        absl::MakeSpan(buckets_[bucket]),
        plan_.exact_bucket[bucket] ? Compression::kNone : compression_,
        static_cast<uint32_t>(bucket));
    absl::MutexLock lock(&mu_);
    if (!status.ok()) {
      error_ = status;
      next_bucket_ = num_buckets;
    } else {
      ++next_bucket_;
    }
  }
}

absl::Status BucketedAllreduce::Wait() {
  for (size_t t = 0; t < added_.size(); ++t) {
    if (!added_[t]) {
      absl::MutexLock lock(&mu_);
      error_ = absl::FailedPreconditionError(
          absl::StrCat("the step ended without tensor ", t,
                       ": its bucket cannot be "
                       "reduced, and the ring is out of step"));
      open_ = false;
      return error_;
    }
  }
  absl::MutexLock lock(&mu_);
  const int num_buckets = static_cast<int>(buckets_.size());
  auto done = [this, num_buckets]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return next_bucket_ == num_buckets;
  };
  mu_.Await(absl::Condition(&done));
  open_ = false;
  return error_;
}

absl::Span<const float> BucketedAllreduce::Reduced(int tensor) const {
  const BucketPlan::Place place = plan_.places[tensor];
  return absl::MakeConstSpan(buckets_[place.bucket])
      .subspan(place.offset, tensor_sizes_[tensor]);
}

}  // namespace ps::allreduce
