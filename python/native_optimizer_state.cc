// The servers' optimizer state as Python dicts of NumPy arrays.

#include "python/native_optimizer_state.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pybind11/numpy.h"
#include "pybind11/stl.h"
#include "python/status_exceptions.h"

namespace py = pybind11;

namespace ps {
namespace {

using FloatArray =
    py::array_t<float, py::array::c_style | py::array::forcecast>;

}  // namespace

py::dict ReadOptimizerState(ParameterClient& client) {
  absl::StatusOr<OptimizerState> read;
  {
    py::gil_scoped_release release;
    read = client.ReadOptimizerState();
  }
  OptimizerState state = ValueOrThrow(std::move(read));
  const std::vector<TensorSpec>& specs = client.model().tensors;
  py::list tensors;
  for (size_t t = 0; t < state.tensors.size(); ++t) {
    const std::vector<int64_t>& shape = specs[t].shape;
    py::dict vectors;
    for (auto& [name, values] : state.tensors[t].vectors) {
      FloatArray array(std::vector<py::ssize_t>(shape.begin(), shape.end()));
      std::copy(values.begin(), values.end(), array.mutable_data());
      vectors[py::str(name)] = std::move(array);
    }
    py::dict tensor;
    tensor["update_count"] = state.tensors[t].update_count;
    tensor["vectors"] = std::move(vectors);
    tensors.append(std::move(tensor));
  }
  py::dict out;
  out["kind"] = std::string(OptimizerKindName(state.kind));
  out["version"] = state.version;
  out["tensors"] = std::move(tensors);
  return out;
}

void WriteOptimizerState(ParameterClient& client, const py::dict& state,
                         std::optional<uint64_t> at_version) {
  OptimizerState native;
  const std::string kind = state["kind"].cast<std::string>();
  if (kind == "adam") {
    native.kind = OptimizerKind::kAdam;
  } else if (kind == "sgd") {
    native.kind = OptimizerKind::kSgd;
  } else {
    throw py::value_error(
        absl::StrCat("optimizer state of kind '", kind, "': 'adam' or 'sgd'"));
  }
  for (const py::handle tensor : state["tensors"].cast<py::list>()) {
    const py::dict entry = tensor.cast<py::dict>();
    TensorOptimizerState out;
    out.update_count = entry["update_count"].cast<uint64_t>();
    for (const auto& [name, values] : entry["vectors"].cast<py::dict>()) {
      const FloatArray array = FloatArray::ensure(values);
      if (!array) throw py::type_error("optimizer state values: not floats");
      out.vectors.emplace_back(
          name.cast<std::string>(),
          std::vector<float>(array.data(), array.data() + array.size()));
    }
    native.tensors.push_back(std::move(out));
  }
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = client.WriteOptimizerState(native, at_version);
  }
  ThrowIfError(status);
}

}  // namespace ps
