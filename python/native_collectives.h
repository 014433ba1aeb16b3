#ifndef PS_PYTHON_NATIVE_COLLECTIVES_H_
#define PS_PYTHON_NATIVE_COLLECTIVES_H_

#include "client/parameter_client.h"
#include "pybind11/pybind11.h"

namespace ps {

// Adds NativeCollectives and NativePending (client/collectives.h over NumPy
// float32 arrays) to `module`. Call once, from the module's init.
void DefineCollectives(pybind11::module_& module);

// Connects to the collectives of the servers `options` names, as its rank;
// a NativeCollectives. The GIL is released while connecting.
pybind11::object ConnectCollectives(const ClientOptions& options);

}  // namespace ps

#endif  // PS_PYTHON_NATIVE_COLLECTIVES_H_
