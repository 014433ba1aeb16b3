#ifndef PS_PYTHON_MODEL_TYPES_H_
#define PS_PYTHON_MODEL_TYPES_H_

// The declaration's types in paramserver._native: Initializer
// (ps::InitializerSpec), TensorSpec, OptimizerSpec and Registration, with reprs
// that read as the Python that builds them.

#include "pybind11/pybind11.h"

namespace ps {

void DefineModelTypes(pybind11::module_& module);

}  // namespace ps

#endif  // PS_PYTHON_MODEL_TYPES_H_
