// allreduce::JoinRing, GlooGroup and BucketedAllreduce for Python: what
// paramserver.torch's all-reduce mode (paramserver/torch/_allreduce.py)
// needs. NumPy arrays in; the ring writes into them or into the buckets.

#include "python/native_ring.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "allreduce/bucketed_allreduce.h"
#include "allreduce/gloo_group.h"
#include "allreduce/join_ring.h"
#include "pybind11/numpy.h"
#include "pybind11/stl.h"
#include "python/status_exceptions.h"

namespace py = pybind11;

namespace ps {
namespace {

// Arrays the ring writes into must be the caller's own memory: no cast.
using FloatArray = py::array_t<float, py::array::c_style>;
using ByteArray = py::array_t<uint8_t, py::array::c_style>;

absl::Span<float> Writable(FloatArray& array) {
  return absl::Span<float>(array.mutable_data(), array.size());
}

class NativeRing {
 public:
  explicit NativeRing(allreduce::JoinedRing joined)
      : round_(joined.round), group_(std::move(joined.group)) {}

  uint64_t round() const { return round_; }
  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  allreduce::GlooGroup* group() { return group_.get(); }

  void AllreduceSum(FloatArray array, uint32_t tag) {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = group_->AllreduceSum(Writable(array), tag);
    }
    ThrowIfError(status);
  }

  void Broadcast(ByteArray array, int root, uint32_t tag) {
    absl::Span<char> data(reinterpret_cast<char*>(array.mutable_data()),
                          array.size());
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = group_->Broadcast(data, root, tag);
    }
    ThrowIfError(status);
  }

 private:
  const uint64_t round_;
  const std::unique_ptr<allreduce::GlooGroup> group_;
};

class NativeBuckets {
 public:
  explicit NativeBuckets(std::unique_ptr<allreduce::BucketedAllreduce> reduce)
      : reduce_(std::move(reduce)) {}

  ~NativeBuckets() {
    // Waits for the bucket in flight, which needs no GIL.
    py::gil_scoped_release release;
    reduce_.reset();
  }

  int num_buckets() const {
    return static_cast<int>(reduce_->plan().bucket_sizes.size());
  }

  int BucketOf(int tensor) const {
    CheckTensor(tensor);
    return reduce_->plan().places[tensor].bucket;
  }

  void Begin() { ThrowIfError(reduce_->Begin()); }

  // Called from autograd's hooks: a copy into the bucket, under the GIL
  // (the bucket's all-reduce then runs on the object's own thread).
  void Add(int tensor,
           py::array_t<float, py::array::c_style | py::array::forcecast> values,
           float scale) {
    ThrowIfError(reduce_->Add(
        tensor, absl::Span<const float>(values.data(), values.size()), scale));
  }

  void Wait() {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = reduce_->Wait();
    }
    ThrowIfError(status);
  }

  void ReducedInto(int tensor, FloatArray out) const {
    CheckTensor(tensor);
    absl::Span<const float> reduced = reduce_->Reduced(tensor);
    if (static_cast<size_t>(out.size()) != reduced.size()) {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat("tensor ", tensor, " has ", reduced.size(),
                       " elements, the array ", out.size())));
    }
    std::copy(reduced.begin(), reduced.end(), out.mutable_data());
  }

 private:
  void CheckTensor(int tensor) const {
    if (tensor < 0 ||
        tensor >= static_cast<int>(reduce_->plan().places.size())) {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat("no tensor ", tensor, " in the buckets")));
    }
  }

  std::unique_ptr<allreduce::BucketedAllreduce> reduce_;
};

std::unique_ptr<NativeRing> JoinRing(const std::string& coordinator, int rank,
                                     int num_workers, const std::string& job_id,
                                     const std::string& hostname,
                                     double join_timeout_s, double timeout_s) {
  allreduce::RingOptions options;
  options.coordinator = coordinator;
  options.rank = rank;
  options.num_workers = num_workers;
  options.job_id = job_id;
  options.hostname = hostname;
  options.join_timeout = absl::Seconds(join_timeout_s);
  options.timeout = absl::Seconds(timeout_s);
  absl::StatusOr<allreduce::JoinedRing> joined;
  {
    py::gil_scoped_release release;
    joined = allreduce::JoinRing(options);
  }
  return std::make_unique<NativeRing>(ValueOrThrow(std::move(joined)));
}

std::unique_ptr<NativeBuckets> MakeBuckets(NativeRing& ring,
                                           std::vector<size_t> sizes,
                                           size_t bucket_bytes) {
  return std::make_unique<NativeBuckets>(
      ValueOrThrow(allreduce::BucketedAllreduce::Create(
          ring.group(), std::move(sizes), bucket_bytes)));
}

}  // namespace

void DefineRing(py::module_& m) {
  m.def("join_ring", &JoinRing, py::arg("coordinator"), py::arg("rank"),
        py::arg("num_workers"), py::arg("job_id"), py::arg("hostname"),
        py::arg("join_timeout_s"), py::arg("timeout_s"));
  py::class_<NativeRing>(m, "NativeRing")
      .def_property_readonly("round", &NativeRing::round)
      .def_property_readonly("rank", &NativeRing::rank)
      .def_property_readonly("size", &NativeRing::size)
      .def("allreduce_sum_", &NativeRing::AllreduceSum, py::arg("array"),
           py::arg("tag"))
      .def("broadcast_", &NativeRing::Broadcast, py::arg("array"),
           py::arg("root"), py::arg("tag"))
      // The buckets borrow the ring's group: the ring lives as long.
      .def("buckets", &MakeBuckets, py::arg("sizes"), py::arg("bucket_bytes"),
           py::keep_alive<0, 1>());
  py::class_<NativeBuckets>(m, "NativeBuckets")
      .def_property_readonly("num_buckets", &NativeBuckets::num_buckets)
      .def("bucket_of", &NativeBuckets::BucketOf, py::arg("tensor"))
      .def("begin", &NativeBuckets::Begin)
      .def("add", &NativeBuckets::Add, py::arg("tensor"), py::arg("values"),
           py::arg("scale"))
      .def("wait", &NativeBuckets::Wait)
      .def("reduced_into", &NativeBuckets::ReducedInto, py::arg("tensor"),
           py::arg("out"));
}

}  // namespace ps
