#include "client/parameter_client.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/memory/memory.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/connect.h"
#include "client/optimizer_state_calls.h"
#include "client/shard_fanout.h"
#include "common/chunk_wire.h"
#include "common/cluster_address.h"
#include "common/partition.h"
#include "common/worker_environment.h"
#include "grpcpp/channel.h"
#include "proto/parameter_server.pb.h"

namespace ps {
namespace {

using client_internal::ShardFanout;

absl::Status ValidateOptions(const ClientOptions& options) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("ClientOptions: no servers given");
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& address : options.servers) {
    if (absl::Status s = ValidateServerAddress(address); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ClientOptions.servers: ", s.message()));
    }
    if (!seen.insert(address).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("ClientOptions.servers: ", address, " is given twice"));
    }
  }
  if (options.rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions.rank must not be negative, got ", options.rank));
  }
  if (absl::Status s = ValidateJobId(options.job_id); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions.job_id: ", s.message()));
  }
  if (options.chunk_elements < 1 ||
      options.chunk_elements > kMaxChunkElements) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions.chunk_elements must be in [1, ",
                     kMaxChunkElements, "], got ", options.chunk_elements));
  }
  if (options.connect_timeout < absl::ZeroDuration() ||
      options.retry_timeout < absl::ZeroDuration() ||
      options.heartbeat_period < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "ClientOptions: connect_timeout, retry_timeout and heartbeat_period "
        "must not be negative");
  }
  if (options.initial_backoff <= absl::ZeroDuration() ||
      options.max_backoff < options.initial_backoff) {
    return absl::InvalidArgumentError(
        "ClientOptions: initial_backoff must be positive and at most "
        "max_backoff");
  }
  return absl::OkStatus();
}

absl::Status NotDeclared() {
  return absl::FailedPreconditionError(
      "ParameterClient: Declare the model first");
}

// What StartStep returns when the step cannot start: every call fails the
// same way.
class FailedStepPush final : public StepPush {
 public:
  explicit FailedStepPush(absl::Status status) : status_(std::move(status)) {}
  absl::Status Send(int, absl::Span<const float>) override { return status_; }
  absl::Status Finish() override { return status_; }
  absl::StatusOr<uint64_t> FinishWithPull(TensorValues&) override {
    return status_;
  }

 private:
  const absl::Status status_;
};

}  // namespace

absl::StatusOr<Compression> Compression::FromName(absl::string_view name,
                                                  double topk_ratio) {
  Compression compression;
  if (name == "bf16") {
    compression.kind = Kind::kBfloat16;
  } else if (name == "fp16") {
    compression.kind = Kind::kFloat16;
  } else if (name == "topk") {
    compression.kind = Kind::kTopK;
  } else if (name != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "compression must be none, bf16, fp16 or topk, got \"", name, "\""));
  }
  if (!(topk_ratio > 0 && topk_ratio <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("topk_ratio must be in (0, 1], got ", topk_ratio));
  }
  compression.topk_ratio = topk_ratio;
  return compression;
}

absl::StatusOr<ClientOptions> ClientOptions::FromEnvironment() {
  absl::StatusOr<WorkerEnvironment> environment =
      ReadWorkerEnvironment([](const char* name) { return std::getenv(name); });
  if (!environment.ok()) return environment.status();
  ClientOptions options;
  options.servers = std::move(environment->servers);
  options.rank = environment->rank;
  options.job_id = std::move(environment->job_id);
  options.tls_ca_file = std::move(environment->tls_ca_file);
  options.tls_cert_file = std::move(environment->tls_cert_file);
  options.tls_key_file = std::move(environment->tls_key_file);
  options.tls_server_name = std::move(environment->tls_server_name);
  options.token_file = std::move(environment->token_file);
  return options;
}

absl::StatusOr<WorkerPlace> WorkerPlace::FromEnvironment() {
  absl::StatusOr<WorkerEnvironment> environment =
      ReadWorkerEnvironment([](const char* name) { return std::getenv(name); });
  if (!environment.ok()) return environment.status();
  return WorkerPlace{environment->rank, environment->num_workers,
                     environment->local_rank, environment->local_num_workers};
}

ClientOptions ClientOptions::AuthFromEnvironment() {
  WorkerEnvironment environment;
  ReadAuthEnvironment([](const char* name) { return std::getenv(name); },
                      &environment);
  ClientOptions options;
  options.tls_ca_file = std::move(environment.tls_ca_file);
  options.tls_cert_file = std::move(environment.tls_cert_file);
  options.tls_key_file = std::move(environment.tls_key_file);
  options.tls_server_name = std::move(environment.tls_server_name);
  options.token_file = std::move(environment.token_file);
  return options;
}

// The client's state. Everything Declare sets is set once, under `mu_`, and
// never replaced, so the other calls take the pointers under the lock and
// make their calls without it.
class ParameterClient::Impl {
 public:
  Impl(ClientOptions options,
       std::vector<std::shared_ptr<grpc::Channel>> channels)
      : options_(std::move(options)), channels_(std::move(channels)) {}

  absl::StatusOr<Registration> Declare(const ModelSpec& model,
                                       uint64_t planned_steps,
                                       uint32_t max_examples_per_push) {
    if (absl::Status s = ValidateModelSpec(model, DeclarationLimits());
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("declared model: ", s.message()));
    }
    {
      absl::MutexLock lock(&mu_);
      if (fanout_ != nullptr || declaring_) {
        return absl::FailedPreconditionError(
            "ParameterClient: Declare was already called");
      }
      declaring_ = true;
    }
    absl::StatusOr<Registration> registration =
        Register(model, planned_steps, max_examples_per_push);
    absl::MutexLock lock(&mu_);
    declaring_ = false;  // A failed Declare may be tried again.
    return registration;
  }

  const ModelSpec& model() const {
    absl::MutexLock lock(&mu_);
    return partition_ != nullptr ? partition_->model() : empty_model_;
  }

  absl::StatusOr<int> TensorId(absl::string_view name) const {
    const int id = model().FindTensor(name);
    if (id < 0) {
      return absl::NotFoundError(
          absl::StrCat("no tensor \"", name, "\" in the declared model"));
    }
    return id;
  }

  absl::Status Broadcast(TensorValues& values) {
    absl::StatusOr<ShardFanout*> fanout = Fanout(/*for_step=*/false);
    if (!fanout.ok()) return fanout.status();
    if (options_.rank == 0) {
      if (absl::Status s = (*fanout)->UploadInitialValues(values); !s.ok()) {
        return s;
      }
      absl::MutexLock lock(&mu_);
      initial_values_sent_ = true;
    }
    uint64_t step = 0;
    {
      absl::MutexLock lock(&mu_);
      step = registration_.next_step;
    }
    if (absl::Status s = (*fanout)->Pull(step, values).status(); !s.ok()) {
      return s;
    }
    // In ssp and async a push is applied as it arrives: without the
    // barrier, a fast rank's first step could change the weights before a
    // slow rank has pulled rank 0's values.
    return Barrier();
  }

  absl::StatusOr<uint64_t> Pull(uint64_t step, TensorValues& weights,
                                bool final_pull) {
    absl::StatusOr<ShardFanout*> fanout = Fanout(/*for_step=*/true);
    if (!fanout.ok()) return fanout.status();
    return final_pull ? (*fanout)->PullFinal(step, weights)
                      : (*fanout)->Pull(step, weights);
  }

  std::unique_ptr<StepPush> StartStep(const StepInfo& info, bool pull_after) {
    absl::StatusOr<ShardFanout*> fanout = Fanout(/*for_step=*/true);
    if (!fanout.ok()) return std::make_unique<FailedStepPush>(fanout.status());
    return (*fanout)->StartStep(info, pull_after);
  }

  absl::Status SetCompression(int id, const Compression& compression) {
    absl::StatusOr<ShardFanout*> fanout = Fanout(/*for_step=*/false);
    if (!fanout.ok()) return fanout.status();
    return (*fanout)->SetCompression(id, compression);
  }

  absl::Status Barrier() {
    absl::StatusOr<ShardFanout*> fanout = Fanout(/*for_step=*/false);
    if (!fanout.ok()) return fanout.status();
    uint64_t generation = 0;
    {
      absl::MutexLock lock(&mu_);
      generation = barriers_passed_ + 1;
    }
    // A failed barrier does not count: repeating it sends the same
    // generation, which the shard answers alike.
    if (absl::Status s = (*fanout)->Barrier(generation); !s.ok()) return s;
    absl::MutexLock lock(&mu_);
    barriers_passed_ = std::max(barriers_passed_, generation);
    return absl::OkStatus();
  }

  absl::Status Finish() {
    absl::StatusOr<ShardFanout*> fanout = Fanout(/*for_step=*/false);
    if (!fanout.ok()) return fanout.status();
    return (*fanout)->Done();
  }

  absl::StatusOr<OptimizerState> ReadOptimizerState() {
    absl::StatusOr<ShardFanout*> fanout = Fanout(/*for_step=*/false);
    if (!fanout.ok()) return fanout.status();
    return client_internal::ReadOptimizerState(
        (*fanout)->partition(), OptimizerStateShards(), options_.chunk_elements,
        client_internal::RetryPolicy::FromOptions(options_));
  }

  absl::Status WriteOptimizerState(const OptimizerState& state,
                                   std::optional<uint64_t> at_version) {
    absl::StatusOr<ShardFanout*> fanout = Fanout(/*for_step=*/false);
    if (!fanout.ok()) return fanout.status();
    if (options_.rank != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", options_.rank,
          " writes the optimizer state; only rank 0 does (the servers hold "
          "one state for every rank)"));
    }
    return client_internal::WriteOptimizerState(
        (*fanout)->partition(), OptimizerStateShards(), state, at_version,
        options_.chunk_elements,
        client_internal::RetryPolicy::FromOptions(options_));
  }

 private:
  // Builds the partition and registers; publishes both on success.
  absl::StatusOr<Registration> Register(const ModelSpec& model,
                                        uint64_t planned_steps,
                                        uint32_t max_examples_per_push) {
    absl::StatusOr<Partition> partition =
        Partition::Create(model, static_cast<int>(channels_.size()));
    if (!partition.ok()) return partition.status();
    auto owned_partition = std::make_unique<Partition>(*std::move(partition));
    absl::StatusOr<std::unique_ptr<ShardFanout>> fanout = ShardFanout::Create(
        options_.servers, channels_, owned_partition.get(), options_);
    if (!fanout.ok()) return fanout.status();
    // A fresh id per client, so that a shard can tell a restarted rank; 0
    // means "not given" on the wire.
    uint64_t incarnation = 0;
    absl::BitGen random;
    while (incarnation == 0) incarnation = absl::Uniform<uint64_t>(random);
    absl::StatusOr<Registration> registration =
        (*fanout)->Register(incarnation, planned_steps, max_examples_per_push);
    if (!registration.ok()) return registration.status();
    if (options_.heartbeat_period > absl::ZeroDuration()) {
      (*fanout)->StartHeartbeats(options_.heartbeat_period);
    }
    absl::MutexLock lock(&mu_);
    partition_ = std::move(owned_partition);
    incarnation_ = incarnation;
    fanout_ = *std::move(fanout);
    registration_ = *registration;
    return registration;
  }

  // Every shard as the optimizer state calls reach it; after Declare.
  std::vector<client_internal::OptimizerStateShard> OptimizerStateShards()
      const {
    absl::MutexLock lock(&mu_);
    std::vector<client_internal::OptimizerStateShard> shards;
    for (size_t i = 0; i < channels_.size(); ++i) {
      client_internal::OptimizerStateShard shard;
      shard.name = absl::StrCat("server ", i, " (", options_.servers[i], ")");
      shard.channel = channels_[i];
      proto::RequestHeader& h = shard.header;
      h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
      h.set_partition_fingerprint(partition_->fingerprint());
      h.set_worker_rank(options_.rank);
      h.set_server_index(static_cast<int32_t>(i));
      h.set_incarnation(incarnation_);
      h.set_job_id(options_.job_id);
      shards.push_back(std::move(shard));
    }
    return shards;
  }

  // The fanout, or why the call cannot be made yet. For a step (a pull or
  // push): rank 0 of a new job must first upload the kFromRank0 tensors,
  // which the shards wait for before they answer anything else.
  absl::StatusOr<ShardFanout*> Fanout(bool for_step) const {
    absl::MutexLock lock(&mu_);
    if (fanout_ == nullptr) return NotDeclared();
    if (for_step && options_.rank == 0 && registration_.next_step == 0 &&
        !initial_values_sent_) {
      for (const TensorSpec& tensor : partition_->model().tensors) {
        if (tensor.initializer.kind == InitializerSpec::Kind::kFromRank0) {
          return absl::FailedPreconditionError(absl::StrCat(
              "tensor \"", tensor.name,
              "\" is declared FromRank0: rank 0 calls Broadcast before it "
              "pulls or pushes"));
        }
      }
    }
    return fanout_.get();
  }

  const ClientOptions options_;
  const std::vector<std::shared_ptr<grpc::Channel>> channels_;
  const ModelSpec empty_model_;

  mutable absl::Mutex mu_;
  bool declaring_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<const Partition> partition_ ABSL_GUARDED_BY(mu_);
  // Borrows `partition_`; declared after it, so destroyed first.
  std::unique_ptr<ShardFanout> fanout_ ABSL_GUARDED_BY(mu_);
  Registration registration_ ABSL_GUARDED_BY(mu_);
  bool initial_values_sent_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t barriers_passed_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<std::unique_ptr<ParameterClient>> ParameterClient::Connect(
    const ClientOptions& options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> channels =
      client_internal::ConnectChannels(options);
  if (!channels.ok()) return channels.status();
  return absl::WrapUnique(new ParameterClient(
      std::make_unique<Impl>(options, *std::move(channels))));
}

ParameterClient::ParameterClient(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

ParameterClient::~ParameterClient() = default;

absl::StatusOr<Registration> ParameterClient::Declare(
    const ModelSpec& model, uint64_t planned_steps,
    uint32_t max_examples_per_push) {
  return impl_->Declare(model, planned_steps, max_examples_per_push);
}

const ModelSpec& ParameterClient::model() const { return impl_->model(); }

absl::StatusOr<int> ParameterClient::TensorId(absl::string_view name) const {
  return impl_->TensorId(name);
}

absl::Status ParameterClient::Broadcast(TensorValues& values) {
  return impl_->Broadcast(values);
}

absl::StatusOr<uint64_t> ParameterClient::Pull(uint64_t step,
                                               TensorValues& weights) {
  return impl_->Pull(step, weights, /*final_pull=*/false);
}

std::unique_ptr<StepPush> ParameterClient::StartStep(const StepInfo& info,
                                                     bool pull_after) {
  return impl_->StartStep(info, pull_after);
}

absl::Status ParameterClient::Push(const StepInfo& info,
                                   const TensorValues& gradients) {
  std::unique_ptr<StepPush> push = StartStep(info, /*pull_after=*/false);
  for (size_t id = 0; id < gradients.size(); ++id) {
    if (absl::Status s = push->Send(static_cast<int>(id), gradients[id]);
        !s.ok()) {
      return s;
    }
  }
  return push->Finish();
}

absl::Status ParameterClient::SetCompression(int id,
                                             const Compression& compression) {
  return impl_->SetCompression(id, compression);
}

absl::Status ParameterClient::Barrier() { return impl_->Barrier(); }

absl::StatusOr<OptimizerState> ParameterClient::ReadOptimizerState() {
  return impl_->ReadOptimizerState();
}

absl::Status ParameterClient::WriteOptimizerState(
    const OptimizerState& state, std::optional<uint64_t> at_version) {
  return impl_->WriteOptimizerState(state, at_version);
}

absl::StatusOr<uint64_t> ParameterClient::PullFinal(uint64_t step,
                                                    TensorValues& weights) {
  return impl_->Pull(step, weights, /*final_pull=*/true);
}

absl::Status ParameterClient::Finish() { return impl_->Finish(); }

}  // namespace ps
