// ps::Collectives for Python: NumPy float32 arrays in, new arrays out. Every
// call that waits on the servers releases the GIL; a started collective
// (start_*) keeps its arrays referenced until it is waited for or dropped.

#include "python/native_collectives.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/collectives.h"
#include "pybind11/numpy.h"
#include "pybind11/stl.h"
#include "python/status_exceptions.h"

namespace py = pybind11;

namespace ps {
namespace {

using FloatArray =
    py::array_t<float, py::array::c_style | py::array::forcecast>;

std::vector<int64_t> ShapeOf(const FloatArray& array) {
  return std::vector<int64_t>(array.shape(), array.shape() + array.ndim());
}

absl::Span<const float> In(const FloatArray& array) {
  return absl::Span<const float>(array.data(), array.size());
}

absl::Span<float> Out(FloatArray& array) {
  return absl::Span<float>(array.mutable_data(), array.size());
}

// An allgather's answer as (array of rows, first dimension per rank).
py::tuple Gathered(const GatheredTensor& gathered,
                   const std::vector<int64_t>& shape) {
  int64_t rows = 0;
  for (int64_t d : gathered.first_dims) rows += d;
  std::vector<py::ssize_t> out_shape(shape.begin(), shape.end());
  out_shape[0] = rows;
  FloatArray values(out_shape);
  if (static_cast<size_t>(values.size()) != gathered.values.size()) {
    throw StatusError(absl::DataLossError(
        "the allgather's answer does not match its rows and shape"));
  }
  std::copy(gathered.values.begin(), gathered.values.end(),
            values.mutable_data());
  return py::make_tuple(values, gathered.first_dims);
}

ReduceOp OpOf(int op) {
  switch (op) {
    case 0:
      return ReduceOp::kSum;
    case 1:
      return ReduceOp::kAverage;
    case 2:
      return ReduceOp::kMin;
    case 3:
      return ReduceOp::kMax;
  }
  throw StatusError(absl::InvalidArgumentError(
      "op must be 0 (sum), 1 (average), 2 (min) or 3 (max)"));
}

// A started collective: the arrays it reads and writes, and what wait()
// returns once it ended.
class NativePending {
 public:
  NativePending(std::unique_ptr<PendingCollective> pending, py::object keep,
                std::function<py::object()> result)
      : pending_(std::move(pending)),
        keep_(std::move(keep)),
        result_(std::move(result)) {}

  ~NativePending() {
    // Waits for the collective's thread, which needs no GIL.
    py::gil_scoped_release release;
    pending_.reset();
  }

  bool Done() { return pending_->Done(); }

  py::object Wait() {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = pending_->Wait();
    }
    ThrowIfError(status);
    return result_();
  }

 private:
  std::unique_ptr<PendingCollective> pending_;
  py::object keep_;
  std::function<py::object()> result_;
};

class NativeCollectives {
 public:
  explicit NativeCollectives(std::unique_ptr<Collectives> collectives)
      : collectives_(std::move(collectives)) {}

  FloatArray Allreduce(const std::string& name, int op, FloatArray input) {
    FloatArray output(
        std::vector<py::ssize_t>(input.shape(), input.shape() + input.ndim()));
    const std::vector<int64_t> shape = ShapeOf(input);
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = collectives_->Allreduce(name, OpOf(op), shape, In(input),
                                  Out(output));
    }
    ThrowIfError(s);
    return output;
  }

  std::unique_ptr<NativePending> StartAllreduce(const std::string& name, int op,
                                                FloatArray input) {
    FloatArray output(
        std::vector<py::ssize_t>(input.shape(), input.shape() + input.ndim()));
    auto pending = collectives_->StartAllreduce(name, OpOf(op), ShapeOf(input),
                                                In(input), Out(output));
    return std::make_unique<NativePending>(
        std::move(pending), py::make_tuple(input, output),
        [output]() -> py::object { return output; });
  }

  py::tuple Allgather(const std::string& name, FloatArray input) {
    const std::vector<int64_t> shape = ShapeOf(input);
    absl::StatusOr<GatheredTensor> gathered;
    {
      py::gil_scoped_release release;
      gathered = collectives_->Allgather(name, shape, In(input));
    }
    return Gathered(ValueOrThrow(std::move(gathered)), shape);
  }

  std::unique_ptr<NativePending> StartAllgather(const std::string& name,
                                                FloatArray input) {
    const std::vector<int64_t> shape = ShapeOf(input);
    auto gathered = std::make_shared<GatheredTensor>();
    auto pending =
        collectives_->StartAllgather(name, shape, In(input), gathered.get());
    return std::make_unique<NativePending>(std::move(pending), input,
                                           [gathered, shape]() -> py::object {
                                             return Gathered(*gathered, shape);
                                           });
  }

  FloatArray Broadcast(const std::string& name, int root_rank,
                       FloatArray input) {
    FloatArray values(
        std::vector<py::ssize_t>(input.shape(), input.shape() + input.ndim()));
    std::copy(input.data(), input.data() + input.size(), values.mutable_data());
    const std::vector<int64_t> shape = ShapeOf(input);
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = collectives_->Broadcast(name, root_rank, shape, Out(values));
    }
    ThrowIfError(s);
    return values;
  }

  std::unique_ptr<NativePending> StartBroadcast(const std::string& name,
                                                int root_rank,
                                                FloatArray input) {
    FloatArray values(
        std::vector<py::ssize_t>(input.shape(), input.shape() + input.ndim()));
    std::copy(input.data(), input.data() + input.size(), values.mutable_data());
    auto pending = collectives_->StartBroadcast(name, root_rank, ShapeOf(input),
                                                Out(values));
    return std::make_unique<NativePending>(
        std::move(pending), values,
        [values]() -> py::object { return values; });
  }

  py::bytes BroadcastBytes(const std::string& name, int root_rank,
                           const std::string& bytes) {
    absl::StatusOr<std::string> answer;
    {
      py::gil_scoped_release release;
      answer = collectives_->BroadcastBytes(name, root_rank, bytes);
    }
    return py::bytes(ValueOrThrow(std::move(answer)));
  }

  void Barrier() {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = collectives_->Barrier();
    }
    ThrowIfError(s);
  }

  int Join() {
    absl::StatusOr<int> last;
    {
      py::gil_scoped_release release;
      last = collectives_->Join();
    }
    return ValueOrThrow(std::move(last));
  }

 private:
  std::unique_ptr<Collectives> collectives_;
};

}  // namespace

py::object ConnectCollectives(const ClientOptions& options) {
  absl::StatusOr<std::unique_ptr<Collectives>> collectives;
  {
    py::gil_scoped_release release;
    collectives = Collectives::Connect(options);
  }
  return py::cast(std::make_unique<NativeCollectives>(
      ValueOrThrow(std::move(collectives))));
}

void DefineCollectives(py::module_& m) {
  py::class_<NativePending>(m, "NativePending")
      .def("done", &NativePending::Done)
      .def("wait", &NativePending::Wait);
  py::class_<NativeCollectives>(m, "NativeCollectives")
      .def("allreduce", &NativeCollectives::Allreduce, py::arg("name"),
           py::arg("op"), py::arg("array"))
      .def("start_allreduce", &NativeCollectives::StartAllreduce,
           py::arg("name"), py::arg("op"), py::arg("array"))
      .def("allgather", &NativeCollectives::Allgather, py::arg("name"),
           py::arg("array"))
      .def("start_allgather", &NativeCollectives::StartAllgather,
           py::arg("name"), py::arg("array"))
      .def("broadcast", &NativeCollectives::Broadcast, py::arg("name"),
           py::arg("root_rank"), py::arg("array"))
      .def("start_broadcast", &NativeCollectives::StartBroadcast,
           py::arg("name"), py::arg("root_rank"), py::arg("array"))
      .def("broadcast_bytes", &NativeCollectives::BroadcastBytes,
           py::arg("name"), py::arg("root_rank"), py::arg("data"))
      .def("barrier", &NativeCollectives::Barrier)
      .def("join", &NativeCollectives::Join);
}

}  // namespace ps
