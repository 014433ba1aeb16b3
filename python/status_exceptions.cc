#include "python/status_exceptions.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace py = pybind11;

namespace ps {
namespace {

// The module's exception classes. Created once when the module loads and
// never freed (the module is never unloaded), so no refcount games.
struct ExceptionClasses {
  PyObject* error = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* failed_precondition = nullptr;
  PyObject* not_found = nullptr;
  PyObject* unavailable = nullptr;
  PyObject* deadline_exceeded = nullptr;
  PyObject* aborted = nullptr;
};
ExceptionClasses exceptions;

// Adds class `name` to `module`, deriving from Error and, where a builtin
// exception means the same, from that too (so `except ValueError` works).
// `code` is the class's default for the instances' `code` attribute, so that
// errors raised in Python carry one too.
PyObject* AddException(py::module_& module, const char* name, PyObject* base,
                       PyObject* builtin, absl::StatusCode code,
                       const char* doc) {
  py::tuple bases = builtin != nullptr
                        ? py::make_tuple(py::handle(base), py::handle(builtin))
                        : py::make_tuple(py::handle(base));
  const std::string qualified = absl::StrCat("paramserver._native.", name);
  PyObject* cls =
      PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  py::handle(cls).attr("code") = absl::StatusCodeToString(code);
  module.add_object(name, py::handle(cls));  // The module takes a reference.
  Py_INCREF(cls);                            // And we keep ours.
  return cls;
}

PyObject* ClassFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return exceptions.invalid_argument;
    case absl::StatusCode::kFailedPrecondition:
      return exceptions.failed_precondition;
    case absl::StatusCode::kNotFound:
      return exceptions.not_found;
    case absl::StatusCode::kUnavailable:
      return exceptions.unavailable;
    case absl::StatusCode::kDeadlineExceeded:
      return exceptions.deadline_exceeded;
    case absl::StatusCode::kAborted:
      return exceptions.aborted;
    default:
      return exceptions.error;
  }
}

void RaiseStatus(const absl::Status& status) {
  PyObject* cls = ClassFor(status.code());
  // Servers' messages may quote bytes a peer sent: never fail on them.
  const absl::string_view text = status.message();
  py::object message = py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(
      text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
  if (!message) throw py::error_already_set();
  py::object instance = py::handle(cls)(message);
  instance.attr("code") = absl::StatusCodeToString(status.code());
  PyErr_SetObject(cls, instance.ptr());
}

}  // namespace

void DefineExceptions(py::module_& module) {
  exceptions.error = AddException(
      module, "Error", PyExc_RuntimeError, nullptr, absl::StatusCode::kUnknown,
      "A call of the client library failed; `code` names the status.");
  exceptions.invalid_argument = AddException(
      module, "InvalidArgumentError", exceptions.error, PyExc_ValueError,
      absl::StatusCode::kInvalidArgument, "A bad argument or declaration.");
  exceptions.failed_precondition =
      AddException(module, "FailedPreconditionError", exceptions.error, nullptr,
                   absl::StatusCode::kFailedPrecondition,
                   "Not now: e.g. a declaration that differs from rank 0's.");
  exceptions.not_found =
      AddException(module, "NotFoundError", exceptions.error, PyExc_LookupError,
                   absl::StatusCode::kNotFound, "No such tensor.");
  exceptions.unavailable = AddException(
      module, "UnavailableError", exceptions.error, PyExc_ConnectionError,
      absl::StatusCode::kUnavailable, "A shard stayed unreachable.");
  exceptions.deadline_exceeded = AddException(
      module, "DeadlineExceededError", exceptions.error, PyExc_TimeoutError,
      absl::StatusCode::kDeadlineExceeded, "A shard did not answer in time.");
  exceptions.aborted =
      AddException(module, "AbortedError", exceptions.error, nullptr,
                   absl::StatusCode::kAborted, "A shard aborted the call.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      RaiseStatus(e.status());
    }
  });
}

}  // namespace ps
