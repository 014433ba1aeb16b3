// paramserver._native: the public client library (client/parameter_client.h)
// as a CPython extension module. The Python package paramserver wraps it;
// see python/paramserver/__init__.py for the API users call.
//
// Memory: a client owns one float32 buffer per declared tensor, filled by
// every pull; Python sees them as NumPy arrays that alias the buffers (no
// copy), keep the client alive, and are overwritten by the next pull. A
// gradient passed to a step's send() is read where it lies when it already
// is C-contiguous float32, and kept referenced until the step finishes, as
// the client library requires.
//
// The GIL is released for every call that waits on the network, so other
// Python threads (and autograd hooks) run meanwhile. Errors are raised as
// paramserver.Error or a subclass per status code, with the library's
// message, which names the shard and carries the server's own words.

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/parameter_client.h"
#include "pybind11/numpy.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/model_types.h"
#include "python/native_collectives.h"
#include "python/native_optimizer_state.h"
#include "python/native_ring.h"
#include "python/saved_models.h"
#include "python/status_exceptions.h"

namespace py = pybind11;

namespace ps {
namespace {

absl::Duration Seconds(double seconds) {
  if (!(seconds >= 0)) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("a timeout must be >= 0 seconds, got ", seconds)));
  }
  return absl::Seconds(seconds);
}

// A connected client and the weight buffers Python's arrays alias.
//
// Thread-safety: every method may be called from any Python thread; calls
// that fill the buffers take `fill_mu_` (with the GIL released), so two
// pulls never write them at once. The ParameterClient is shared with open
// steps, so close() while a step is open leaves that step usable.
class NativeClient {
 public:
  NativeClient(std::unique_ptr<ParameterClient> client, ClientOptions options)
      : client_(std::move(client)),
        rank_(options.rank),
        options_(std::move(options)) {}

  int rank() const { return rank_; }
  // What the client connected with (for the collectives' connection).
  const ClientOptions& options() const { return options_; }

  Registration Declare(const std::vector<TensorSpec>& tensors,
                       uint64_t planned_steps, uint64_t seed,
                       std::optional<OptimizerSpec> optimizer,
                       uint32_t max_examples_per_push) {
    ModelSpec model;
    model.tensors = tensors;
    model.seed = seed;
    model.optimizer = optimizer;
    std::shared_ptr<ParameterClient> client = Client();
    absl::StatusOr<Registration> registration;
    {
      py::gil_scoped_release release;
      absl::MutexLock lock(&fill_mu_);
      registration =
          client->Declare(model, planned_steps, max_examples_per_push);
      if (registration.ok()) {
        // Shaped once; later fills resize to the same sizes, which never
        // moves a vector's memory, so Python's views stay valid.
        weights_.resize(model.tensors.size());
        for (size_t t = 0; t < model.tensors.size(); ++t) {
          weights_[t].assign(model.tensors[t].num_elements(), 0.0f);
        }
        RecordBuffersLocked();
      }
    }
    return ValueOrThrow(std::move(registration));
  }

  std::vector<TensorSpec> Model() const { return Client()->model().tensors; }

  int TensorId(const std::string& name) const {
    return ValueOrThrow(Client()->TensorId(name));
  }

  // Views of the weight buffers, in declaration order; each keeps `self`
  // alive.
  py::list Weights(py::object self) {
    const std::vector<TensorSpec>& tensors = Client()->model().tensors;
    py::list views;
    for (size_t t = 0; t < buffers_.size(); ++t) {
      const std::vector<int64_t>& shape = tensors[t].shape;
      views.append(py::array_t<float>(
          std::vector<py::ssize_t>(shape.begin(), shape.end()), buffers_[t],
          self));
    }
    return views;
  }

  void Broadcast() {
    std::shared_ptr<ParameterClient> client = Client();
    Fill([&] { return client->Broadcast(weights_); });
  }

  uint64_t Pull(uint64_t step, bool final_pull) {
    std::shared_ptr<ParameterClient> client = Client();
    absl::StatusOr<uint64_t> version;
    Fill([&] {
      version = final_pull ? client->PullFinal(step, weights_)
                           : client->Pull(step, weights_);
      return version.status();
    });
    return *version;
  }

  // Runs `call`, which fills weights_, with the GIL released and the
  // buffers locked; raises its error, or an internal one if the buffers
  // moved (Python's views would then point at freed memory).
  template <typename Call>
  void Fill(Call call) {
    absl::Status status;
    {
      py::gil_scoped_release release;
      absl::MutexLock lock(&fill_mu_);
      status = call();
      if (status.ok()) status = CheckBuffersLocked();
    }
    ThrowIfError(status);
  }

  // ps::Compression by the worker's --compression names.
  void SetCompression(int id, const std::string& kind, double topk_ratio) {
    ThrowIfError(Client()->SetCompression(
        id, ValueOrThrow(Compression::FromName(kind, topk_ratio))));
  }

  void Barrier() {
    std::shared_ptr<ParameterClient> client = Client();
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = client->Barrier();
    }
    ThrowIfError(status);
  }

  void Finish() {
    std::shared_ptr<ParameterClient> client = Client();
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = client->Finish();
    }
    ThrowIfError(status);
  }

  // Drops this object's reference to the connections; they close once no
  // open step holds them either. The weight buffers stay (arrays alias
  // them).
  void Close() {
    std::shared_ptr<ParameterClient> client;
    {
      absl::MutexLock lock(&client_mu_);
      client = std::move(client_);
    }
    py::gil_scoped_release release;
    client.reset();  // May wait for the channels' threads.
  }

  std::shared_ptr<ParameterClient> Client() const {
    absl::MutexLock lock(&client_mu_);
    if (client_ == nullptr) {
      throw StatusError(
          absl::FailedPreconditionError("paramserver: the client is closed"));
    }
    return client_;
  }

  absl::Mutex& fill_mu() { return fill_mu_; }
  TensorValues& weights_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(fill_mu_) {
    return weights_;
  }
  absl::Status CheckBuffersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(fill_mu_) {
    bool same = weights_.size() == buffers_.size();
    for (size_t t = 0; same && t < buffers_.size(); ++t) {
      same = weights_[t].data() == buffers_[t];
    }
    if (same) return absl::OkStatus();
    return absl::InternalError(
        "paramserver: the client library reallocated the weight buffers that "
        "NumPy arrays alias (a bug; please report it)");
  }

 private:
  void RecordBuffersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(fill_mu_) {
    buffers_.clear();
    for (std::vector<float>& w : weights_) buffers_.push_back(w.data());
  }

  mutable absl::Mutex client_mu_;
  std::shared_ptr<ParameterClient> client_ ABSL_GUARDED_BY(client_mu_);
  const int rank_;
  const ClientOptions options_;

  absl::Mutex fill_mu_;
  TensorValues weights_ ABSL_GUARDED_BY(fill_mu_);
  // Where each buffer was when the arrays were made. Set in Declare (once).
  std::vector<float*> buffers_;
};

// One step's push (ps::StepPush) and the arrays it reads from.
class NativeStep {
 public:
  NativeStep(std::shared_ptr<ParameterClient> client, NativeClient* owner,
             py::object owner_ref, std::unique_ptr<StepPush> push)
      : client_(std::move(client)),
        owner_(owner),
        owner_ref_(std::move(owner_ref)),
        push_(std::move(push)) {}

  ~NativeStep() {
    // Dropping an unfinished push cancels its calls and waits for them:
    // without the GIL, so the network threads are never stuck behind it.
    py::gil_scoped_release release;
    push_.reset();
  }

  void Send(
      int id,
      py::array_t<float, py::array::c_style | py::array::forcecast> gradient) {
    if (push_ == nullptr) Finished();
    // Referenced until the step ends: the library reads it from its threads.
    keep_.push_back(gradient);
    const absl::Span<const float> span(gradient.data(),
                                       static_cast<size_t>(gradient.size()));
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = push_->Send(id, span);
    }
    ThrowIfError(status);
  }

  void Finish() {
    if (push_ == nullptr) Finished();
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = push_->Finish();
    }
    Done();
    ThrowIfError(status);
  }

  uint64_t FinishWithPull() {
    if (push_ == nullptr) Finished();
    absl::StatusOr<uint64_t> version;
    absl::Status status;
    {
      py::gil_scoped_release release;
      absl::MutexLock lock(&owner_->fill_mu());
      version = push_->FinishWithPull(owner_->weights_locked());
      status = version.ok() ? owner_->CheckBuffersLocked() : version.status();
    }
    Done();
    ThrowIfError(status);
    return *version;
  }

 private:
  [[noreturn]] static void Finished() {
    throw StatusError(
        absl::FailedPreconditionError("paramserver: the step has finished"));
  }

  // Called with the GIL held: releases the arrays and the push.
  void Done() {
    {
      py::gil_scoped_release release;
      push_.reset();
    }
    keep_.clear();
  }

  std::shared_ptr<ParameterClient> client_;
  NativeClient* owner_;
  py::object owner_ref_;  // Keeps `owner_` (and its buffers) alive.
  std::vector<py::object> keep_;
  std::unique_ptr<StepPush> push_;  // Declared last: destroyed first.
};

// Authentication files and names; unset: the environment's (PS_TLS_*).
struct AuthArgs {
  std::optional<std::string> tls_ca_file;
  std::optional<std::string> tls_cert_file;
  std::optional<std::string> tls_key_file;
  std::optional<std::string> tls_server_name;
  std::optional<std::string> token_file;
};

std::unique_ptr<NativeClient> Connect(
    std::optional<std::vector<std::string>> servers, std::optional<int> rank,
    std::optional<std::string> job_id, std::optional<double> connect_timeout,
    std::optional<double> retry_timeout, bool local_transport,
    const AuthArgs& auth) {
  ClientOptions options;
  if (!servers.has_value()) {
    options = ValueOrThrow(ClientOptions::FromEnvironment());
  } else {
    // Servers named here, but the launcher's TLS settings still apply.
    options = ClientOptions::AuthFromEnvironment();
    options.servers = *servers;
  }
  for (auto [given, field] : {
           std::pair{&auth.tls_ca_file, &options.tls_ca_file},
           std::pair{&auth.tls_cert_file, &options.tls_cert_file},
           std::pair{&auth.tls_key_file, &options.tls_key_file},
           std::pair{&auth.tls_server_name, &options.tls_server_name},
           std::pair{&auth.token_file, &options.token_file},
       }) {
    if (given->has_value()) *field = **given;
  }
  if (rank.has_value()) options.rank = *rank;
  if (job_id.has_value()) options.job_id = *job_id;
  if (connect_timeout.has_value()) {
    options.connect_timeout = Seconds(*connect_timeout);
  }
  if (retry_timeout.has_value())
    options.retry_timeout = Seconds(*retry_timeout);
  options.local_transport = local_transport;
  absl::StatusOr<std::unique_ptr<ParameterClient>> client;
  {
    py::gil_scoped_release release;
    client = ParameterClient::Connect(options);
  }
  return std::make_unique<NativeClient>(ValueOrThrow(std::move(client)),
                                        options);
}

void DefineClient(py::module_& m) {
  m.def(
      "connect",
      [](std::optional<std::vector<std::string>> servers,
         std::optional<int> rank, std::optional<std::string> job_id,
         std::optional<double> connect_timeout,
         std::optional<double> retry_timeout, bool local_transport,
         std::optional<std::string> tls_ca_file,
         std::optional<std::string> tls_cert_file,
         std::optional<std::string> tls_key_file,
         std::optional<std::string> tls_server_name,
         std::optional<std::string> token_file) {
        return Connect(std::move(servers), rank, std::move(job_id),
                       connect_timeout, retry_timeout, local_transport,
                       {std::move(tls_ca_file), std::move(tls_cert_file),
                        std::move(tls_key_file), std::move(tls_server_name),
                        std::move(token_file)});
      },
      py::arg("servers") = py::none(), py::arg("rank") = py::none(),
      py::arg("job_id") = py::none(), py::arg("connect_timeout") = py::none(),
      py::arg("retry_timeout") = py::none(), py::arg("local_transport") = true,
      py::arg("tls_ca_file") = py::none(),
      py::arg("tls_cert_file") = py::none(),
      py::arg("tls_key_file") = py::none(),
      py::arg("tls_server_name") = py::none(),
      py::arg("token_file") = py::none(),
      "Connects to every shard; servers, rank and job id default to the "
      "launcher's PS_SERVERS, PS_RANK and PS_JOB_ID, the authentication "
      "files (also with servers given) to PS_TLS_CA, PS_TLS_CERT, "
      "PS_TLS_KEY, PS_TLS_SERVER_NAME and PS_TOKEN_FILE. local_transport: "
      "reach shards on this host over the Unix socket they announce.");

  m.def(
      "worker_place",
      [] {
        const WorkerPlace place = ValueOrThrow(WorkerPlace::FromEnvironment());
        return py::make_tuple(place.rank, place.num_workers, place.local_rank,
                              place.local_num_workers);
      },
      "(rank, num_workers, local_rank, local_num_workers) as the launcher's "
      "environment says, or srun's or mpirun's without the PS_ ranks.");

  py::class_<NativeClient>(m, "NativeClient")
      .def_property_readonly("rank", &NativeClient::rank)
      .def("declare", &NativeClient::Declare, py::arg("tensors"),
           py::arg("planned_steps"), py::arg("seed") = 1,
           py::arg("optimizer") = py::none(),
           py::arg("max_examples_per_push") = 0)
      .def("model", &NativeClient::Model)
      .def("tensor_id", &NativeClient::TensorId, py::arg("name"))
      .def("weights",
           [](py::object self) {
             return self.cast<NativeClient&>().Weights(self);
           })
      .def("broadcast", &NativeClient::Broadcast)
      .def(
          "pull",
          [](NativeClient& c, uint64_t step) { return c.Pull(step, false); },
          py::arg("step"))
      .def(
          "pull_final",
          [](NativeClient& c, uint64_t step) { return c.Pull(step, true); },
          py::arg("step"))
      .def(
          "start_step",
          [](py::object self, uint64_t step, uint64_t base_version,
             uint32_t num_examples, uint64_t epoch, uint64_t examples_done,
             bool pull_after, std::optional<float> learning_rate) {
            if (learning_rate.has_value() &&
                !(std::isfinite(*learning_rate) && *learning_rate >= 0)) {
              ThrowIfError(absl::InvalidArgumentError(
                  absl::StrCat("learning_rate ", *learning_rate,
                               " is not finite and >= 0")));
            }
            NativeClient& owner = self.cast<NativeClient&>();
            std::shared_ptr<ParameterClient> client = owner.Client();
            StepInfo info;
            info.step = step;
            info.base_version = base_version;
            info.num_examples = num_examples;
            info.cursor = {epoch, examples_done};
            info.learning_rate = learning_rate;
            std::unique_ptr<StepPush> push =
                client->StartStep(info, pull_after);
            return std::make_unique<NativeStep>(std::move(client), &owner, self,
                                                std::move(push));
          },
          py::arg("step"), py::arg("base_version"), py::arg("num_examples"),
          py::arg("epoch"), py::arg("examples_done"), py::arg("pull_after"),
          py::arg("learning_rate") = py::none())
      .def("set_compression", &NativeClient::SetCompression, py::arg("id"),
           py::arg("kind"), py::arg("topk_ratio") = 0.01)
      .def("barrier", &NativeClient::Barrier)
      .def("collectives",
           [](NativeClient& c) { return ConnectCollectives(c.options()); })
      .def("read_optimizer_state",
           [](NativeClient& c) { return ReadOptimizerState(*c.Client()); })
      .def(
          "write_optimizer_state",
          [](NativeClient& c, const py::dict& state,
             std::optional<uint64_t> at_version) {
            WriteOptimizerState(*c.Client(), state, at_version);
          },
          py::arg("state"), py::arg("at_version") = py::none())
      .def("finish", &NativeClient::Finish)
      .def("close", &NativeClient::Close);

  py::class_<NativeStep>(m, "NativeStep")
      .def("send", &NativeStep::Send, py::arg("id"), py::arg("gradient"))
      .def("finish", &NativeStep::Finish)
      .def("finish_with_pull", &NativeStep::FinishWithPull);
}

}  // namespace
}  // namespace ps

PYBIND11_MODULE(_native, m) {
  m.doc() = "The parameter-server client library (see paramserver).";
  ps::DefineExceptions(m);
  ps::DefineModelTypes(m);
  ps::DefineClient(m);
  ps::DefineCollectives(m);
  ps::DefineSavedModels(m);
  ps::DefineRing(m);
}
