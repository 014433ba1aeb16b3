#ifndef PS_PYTHON_STATUS_EXCEPTIONS_H_
#define PS_PYTHON_STATUS_EXCEPTIONS_H_

// absl::Status to Python exceptions for paramserver._native: Error (a
// RuntimeError) and one subclass per status code a caller may act on, each
// also deriving from the builtin exception that means the same
// (InvalidArgumentError is a ValueError, UnavailableError a ConnectionError,
// ...). An instance's `code` is the status code's name; its message is the
// status message, which names the shard and carries the server's words.

#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pybind11/pybind11.h"

namespace ps {

// A failed absl::Status on its way to Python: thrown with the GIL released
// or held, and translated into an exception object once the GIL is back.
class StatusError : public std::exception {
 public:
  explicit StatusError(absl::Status status)
      : status_(std::move(status)), what_(status_.ToString()) {}
  const absl::Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  absl::Status status_;
  std::string what_;
};

inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) throw StatusError(value.status());
  return *std::move(value);
}

// Adds the exception classes to `module` and translates StatusError into
// them. Call once, from the module's init.
void DefineExceptions(pybind11::module_& module);

}  // namespace ps

#endif  // PS_PYTHON_STATUS_EXCEPTIONS_H_
