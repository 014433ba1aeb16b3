#include "python/model_types.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/parameter_client.h"
#include "pybind11/operators.h"
#include "pybind11/stl.h"

namespace py = pybind11;

namespace ps {
namespace {

std::string InitializerRepr(const InitializerSpec& init) {
  using Kind = InitializerSpec::Kind;
  const std::string kind(InitializerKindName(init.kind));
  switch (init.kind) {
    case Kind::kConstant:
      return absl::StrCat("Initializer.constant(", init.value, ")");
    case Kind::kUniform:
      return absl::StrCat("Initializer.uniform(", init.low, ", ", init.high,
                          ")");
    case Kind::kNormal:
      return absl::StrCat("Initializer.normal(", init.mean, ", ", init.stddev,
                          ")");
    case Kind::kGlorotUniform:
      return absl::StrCat("Initializer.glorot_uniform(", init.fan_in, ", ",
                          init.fan_out, ")");
    default:
      return absl::StrCat("Initializer.", kind, "()");
  }
}

}  // namespace

void DefineModelTypes(py::module_& m) {
  py::class_<InitializerSpec>(
      m, "Initializer",
      "How the servers set a tensor before the first step (see "
      "common/model_spec.h).")
      .def_static("zeros", &InitializerSpec::Zeros)
      .def_static("constant", &InitializerSpec::Constant, py::arg("value"))
      .def_static("uniform", &InitializerSpec::Uniform, py::arg("low"),
                  py::arg("high"))
      .def_static("normal", &InitializerSpec::Normal, py::arg("mean"),
                  py::arg("stddev"))
      .def_static("glorot_uniform", &InitializerSpec::GlorotUniform,
                  py::arg("fan_in"), py::arg("fan_out"))
      .def_static("from_rank0", &InitializerSpec::FromRank0)
      .def_property_readonly("kind",
                             [](const InitializerSpec& i) {
                               return std::string(InitializerKindName(i.kind));
                             })
      .def_readonly("value", &InitializerSpec::value)
      .def_readonly("low", &InitializerSpec::low)
      .def_readonly("high", &InitializerSpec::high)
      .def_readonly("mean", &InitializerSpec::mean)
      .def_readonly("stddev", &InitializerSpec::stddev)
      .def_readonly("fan_in", &InitializerSpec::fan_in)
      .def_readonly("fan_out", &InitializerSpec::fan_out)
      .def(py::self == py::self)
      .def("__repr__", &InitializerRepr);

  py::class_<TensorSpec>(m, "TensorSpec", "One declared float32 tensor.")
      .def(py::init([](std::string name, std::vector<int64_t> shape,
                       InitializerSpec initializer, bool weight_decay,
                       bool assigned) {
             TensorSpec spec;
             spec.name = std::move(name);
             spec.shape = std::move(shape);
             spec.initializer = initializer;
             spec.weight_decay = weight_decay;
             spec.assigned = assigned;
             return spec;
           }),
           py::arg("name"), py::arg("shape"),
           py::arg("initializer") = InitializerSpec::Zeros(),
           py::arg("weight_decay") = true, py::arg("assigned") = false)
      .def_readonly("name", &TensorSpec::name)
      .def_property_readonly("shape",
                             [](const TensorSpec& t) {
                               py::tuple shape(t.shape.size());
                               for (size_t i = 0; i < t.shape.size(); ++i)
                                 shape[i] = t.shape[i];
                               return shape;
                             })
      .def_readonly("initializer", &TensorSpec::initializer)
      .def_readonly("weight_decay", &TensorSpec::weight_decay)
      .def_readonly("assigned", &TensorSpec::assigned)
      .def_property_readonly("num_elements", &TensorSpec::num_elements)
      .def("__eq__",
           [](const TensorSpec& a, const TensorSpec& b) {
             return a.name == b.name && a.shape == b.shape &&
                    a.initializer == b.initializer &&
                    a.weight_decay == b.weight_decay &&
                    a.assigned == b.assigned;
           })
      .def("__repr__", [](const TensorSpec& t) {
        return absl::StrCat(
            "TensorSpec('", t.name, "', ", FormatShape(t.shape), ", ",
            InitializerRepr(t.initializer),
            ", weight_decay=", t.weight_decay ? "True" : "False",
            t.assigned ? ", assigned=True" : "", ")");
      });

  py::class_<OptimizerSpec>(
      m, "OptimizerSpec",
      "The optimizer the servers build for the declared model (see "
      "common/model_spec.h); float32 fields.")
      .def_static("sgd", &OptimizerSpec::Sgd, py::arg("learning_rate"),
                  py::arg("momentum") = 0.0f, py::arg("weight_decay") = 0.0f)
      .def_static("adam", &OptimizerSpec::Adam, py::arg("learning_rate"),
                  py::arg("beta1") = 0.9f, py::arg("beta2") = 0.999f,
                  py::arg("epsilon") = 1e-8f, py::arg("weight_decay") = 0.0f)
      .def_property_readonly("kind",
                             [](const OptimizerSpec& o) {
                               return std::string(OptimizerKindName(o.kind));
                             })
      .def_readonly("learning_rate", &OptimizerSpec::learning_rate)
      .def_readonly("momentum", &OptimizerSpec::momentum)
      .def_readonly("weight_decay", &OptimizerSpec::weight_decay)
      .def_readonly("beta1", &OptimizerSpec::beta1)
      .def_readonly("beta2", &OptimizerSpec::beta2)
      .def_readonly("epsilon", &OptimizerSpec::epsilon)
      .def(py::self == py::self)
      .def("__repr__", [](const OptimizerSpec& o) {
        return absl::StrCat("OptimizerSpec(", DescribeOptimizer(o), ")");
      });

  py::class_<Registration>(m, "Registration",
                           "What the servers told a rank that declared.")
      .def_property_readonly("mode",
                             [](const Registration& r) {
                               return std::string(ConsistencyModeName(r.mode));
                             })
      .def_readonly("num_workers", &Registration::num_workers)
      .def_readonly("next_step", &Registration::next_step)
      .def_property_readonly(
          "epoch", [](const Registration& r) { return r.cursor.epoch; })
      .def_property_readonly(
          "examples_done",
          [](const Registration& r) { return r.cursor.examples_done; })
      .def("__repr__", [](const Registration& r) {
        return absl::StrCat("Registration(mode='", ConsistencyModeName(r.mode),
                            "', num_workers=", r.num_workers,
                            ", next_step=", r.next_step,
                            ", epoch=", r.cursor.epoch,
                            ", examples_done=", r.cursor.examples_done, ")");
      });
}

}  // namespace ps
