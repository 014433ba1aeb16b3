#ifndef PS_PYTHON_SAVED_MODELS_H_
#define PS_PYTHON_SAVED_MODELS_H_

// Saved models in paramserver._native: read_model and save_model (the
// worker's --save_model files, common/model_file.h) and read_checkpoint
// (the weights in the servers' checkpoints, update/checkpoint_model.h), as
// lists of (name, float32 array) in declaration order.

#include "pybind11/pybind11.h"

namespace ps {

void DefineSavedModels(pybind11::module_& module);

}  // namespace ps

#endif  // PS_PYTHON_SAVED_MODELS_H_
