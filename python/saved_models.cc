#include "python/saved_models.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_file.h"
#include "common/model_spec.h"
#include "pybind11/numpy.h"
#include "pybind11/stl.h"
#include "python/status_exceptions.h"
#include "update/checkpoint_model.h"

namespace py = pybind11;

namespace ps {
namespace {

using FloatArray =
    py::array_t<float, py::array::c_style | py::array::forcecast>;

// [(name, array)] owning copies of `weights`, shaped as `model` says.
py::list ToArrays(const ModelSpec& model,
                  const std::vector<std::vector<float>>& weights) {
  py::list tensors;
  for (size_t t = 0; t < model.tensors.size(); ++t) {
    const std::vector<int64_t>& shape = model.tensors[t].shape;
    FloatArray array(std::vector<py::ssize_t>(shape.begin(), shape.end()));
    std::memcpy(array.mutable_data(), weights[t].data(),
                weights[t].size() * sizeof(float));
    tensors.append(py::make_tuple(model.tensors[t].name, std::move(array)));
  }
  return tensors;
}

py::list ReadModelFile(const std::string& path) {
  SavedModel saved;
  {
    py::gil_scoped_release release;
    saved = ValueOrThrow(ReadModel(path));
  }
  return ToArrays(saved.model, saved.weights);
}

// `tensors`: (name, array) pairs; arrays are converted to float32.
void SaveModelFile(
    const std::string& path,
    const std::vector<std::pair<std::string, FloatArray>>& tensors) {
  ModelSpec model;
  std::vector<std::vector<float>> weights;
  for (const auto& [name, array] : tensors) {
    TensorSpec& spec = model.tensors.emplace_back();
    spec.name = name;
    spec.shape.assign(array.shape(), array.shape() + array.ndim());
    weights.emplace_back(array.data(), array.data() + array.size());
  }
  // Names and shapes as a declaration's, so that any reader takes them.
  DeclarationLimits limits;
  limits.max_model_bytes = ~uint64_t{0};
  ThrowIfError(ValidateModelSpec(model, limits));
  py::gil_scoped_release release;
  ThrowIfError(SaveModel(path, model, weights));
}

py::tuple ReadCheckpointDir(const std::string& dir) {
  update::CheckpointedModel read;
  {
    py::gil_scoped_release release;
    read = ValueOrThrow(update::ReadCheckpointedModel(dir));
  }
  return py::make_tuple(ToArrays(read.model, read.weights), read.version);
}

}  // namespace

void DefineSavedModels(py::module_& m) {
  m.def("read_model", &ReadModelFile, py::arg("path"),
        "[(name, float32 array)] of a model file (the worker's "
        "--save_model).");
  m.def("save_model", &SaveModelFile, py::arg("path"), py::arg("tensors"),
        "Writes [(name, array)] as a model file, atomically.");
  m.def("read_checkpoint", &ReadCheckpointDir, py::arg("dir"),
        "([(name, float32 array)], version) from the servers' checkpoints "
        "in `dir`, at the newest version every shard wrote.");
}

}  // namespace ps
