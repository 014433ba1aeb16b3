#ifndef PS_PYTHON_NATIVE_OPTIMIZER_STATE_H_
#define PS_PYTHON_NATIVE_OPTIMIZER_STATE_H_

#include <cstdint>
#include <optional>

#include "client/parameter_client.h"
#include "pybind11/pybind11.h"

namespace ps {

// ParameterClient::ReadOptimizerState for Python, with the GIL released
// while the shards answer: a dict {"kind": "adam" or "sgd", "version": int,
// "tensors": [one per declared tensor, by id: {"update_count": int,
// "vectors": {name: float32 array of the tensor's shape, in the
// optimizer's order}}]}.
pybind11::dict ReadOptimizerState(ParameterClient& client);

// ParameterClient::WriteOptimizerState of a dict shaped as
// ReadOptimizerState's ("version" is not read; arrays of any shape with the
// tensor's number of elements, converted to float32). TypeError or KeyError
// for a malformed dict; the client's errors as paramserver exceptions.
void WriteOptimizerState(ParameterClient& client, const pybind11::dict& state,
                         std::optional<uint64_t> at_version);

}  // namespace ps

#endif  // PS_PYTHON_NATIVE_OPTIMIZER_STATE_H_
