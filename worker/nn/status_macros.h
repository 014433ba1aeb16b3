#ifndef PS_WORKER_NN_STATUS_MACROS_H_
#define PS_WORKER_NN_STATUS_MACROS_H_

#include "absl/status/status.h"

// Returns early from the enclosing function with `expr`'s error. Private to
// worker/nn: every step is a chain of backend calls that each may fail.
#define PS_NN_RETURN_IF_ERROR(expr)                                   \
  do {                                                                \
    if (absl::Status ps_nn_s = (expr); !ps_nn_s.ok()) return ps_nn_s; \
  } while (false)

#endif  // PS_WORKER_NN_STATUS_MACROS_H_
