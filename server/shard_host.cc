#include "server/shard_host.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace ps::server {

ShardHost::ShardHost(Builder builder, DeclarationLimits limits)
    : builder_(std::move(builder)), limits_(limits) {}

ShardHost::~ShardHost() = default;

void ShardHost::Install(std::unique_ptr<DeclaredShard> shard) {
  absl::MutexLock lock(&mu_);
  owned_ = std::move(shard);
  shard_.store(owned_.get(), std::memory_order_release);
}

absl::StatusOr<DeclaredShard*> ShardHost::Declare(int rank,
                                                  const ModelSpec& model) {
  return Declare(rank, model, [](DeclaredShard&) { return absl::OkStatus(); });
}

absl::StatusOr<DeclaredShard*> ShardHost::Declare(
    int rank, const ModelSpec& model,
    absl::FunctionRef<absl::Status(DeclaredShard&)> admit) {
  if (absl::Status s = ValidateModelSpec(model, limits_); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (owned_ != nullptr) {
    if (absl::Status s = CompareModelSpecs(owned_->model(), owned_->declared_by,
                                           model, absl::StrCat("rank ", rank));
        !s.ok()) {
      return s;
    }
    if (absl::Status s = admit(*owned_); !s.ok()) return s;
    return owned_.get();
  }
  if (rank != 0) {
    return absl::UnavailableError(absl::StrCat(
        "rank ", rank, " must wait: rank 0 has not declared the model yet"));
  }
  absl::StatusOr<std::unique_ptr<DeclaredShard>> built = builder_(model);
  if (!built.ok()) return built.status();
  (*built)->declared_by = "rank 0";
  // Refused: the shard built for it is dropped here, unpublished.
  if (absl::Status s = admit(**built); !s.ok()) return s;
  owned_ = *std::move(built);
  shard_.store(owned_.get(), std::memory_order_release);
  spdlog::info(
      "rank 0 declared {} tensors, {} elements; this shard holds {} "
      "slices, {} elements",
      model.tensors.size(), model.total_elements(), owned_->store->num_slices(),
      owned_->store->num_elements());
  return owned_.get();
}

absl::StatusOr<DeclaredShard*> ShardHost::Require(
    absl::string_view what) const {
  DeclaredShard* shard = get();
  if (shard == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " before any model was declared: register first"));
  }
  return shard;
}

void ShardHost::StopAndCheckpoint() {
  DeclaredShard* shard = get();
  if (shard == nullptr) return;
  shard->coordinator->Shutdown();
  if (shard->checkpointer != nullptr &&
      !shard->store->awaiting_initial_values()) {
    absl::StatusOr<std::string> written = shard->checkpointer->WriteNow();
    (void)written;  // Logged by the checkpointer.
  }
}

}  // namespace ps::server
