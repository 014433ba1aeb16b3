#include "server/register_handler.h"

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/consistency_mode_proto.h"
#include "common/declaration_proto.h"
#include "server/push_message_proto.h"
#include "server/update_coordinator.h"
#include "spdlog/spdlog.h"
#include "update/shard_store.h"

namespace ps::server {

absl::Status ServeRegister(const proto::RegisterRequest& request,
                           const ShardIdentity& shard, ShardHost& host,
                           proto::RegisterResponse* response) {
  // Everything but the fingerprint, which the declaration gives.
  ShardIdentity before_declaration = shard;
  before_declaration.partition_fingerprint =
      request.header().partition_fingerprint();
  if (absl::Status s = ValidateRequestHeader(
          RequestHeaderFromProto(request.header()), before_declaration);
      !s.ok()) {
    return s;
  }
  const int rank = request.header().worker_rank();
  absl::StatusOr<ModelSpec> model = ModelSpecFromProto(request.declaration());
  if (!model.ok()) {
    spdlog::warn("worker {} refused: {}", rank, model.status().ToString());
    return model.status();
  }
  // Every check runs before the host keeps a shard it built for this
  // declaration: a refused rank 0 leaves no model behind.
  absl::StatusOr<RankProgress> registered;
  UpdateCoordinator* coordinator = nullptr;
  absl::StatusOr<DeclaredShard*> declared_shard =
      host.Declare(rank, *model, [&](DeclaredShard& declared) -> absl::Status {
        if (absl::Status s = ValidateRequestHeader(
                RequestHeaderFromProto(request.header()), declared.identity);
            !s.ok()) {
          return s;
        }
        if (rank != 0 && declared.store->awaiting_initial_values()) {
          return absl::UnavailableError(absl::StrCat(
              "rank ", rank, " must wait: rank 0 has not sent the values of ",
              declared.store->FirstTensorAwaitingValues(), " yet"));
        }
        coordinator = declared.coordinator.get();
        registered = coordinator->Register(rank, request.incarnation(),
                                           request.planned_steps(),
                                           request.max_examples_per_push());
        return registered.status();
      });
  if (!declared_shard.ok()) {
    // Waiting for rank 0 is expected, not worth a warning.
    if (declared_shard.status().code() != absl::StatusCode::kUnavailable) {
      spdlog::warn("worker {} (incarnation {}) refused: {}", rank,
                   request.incarnation(), declared_shard.status().ToString());
    }
    return declared_shard.status();
  }
  const RankProgress& progress = *registered;
  response->set_mode(ConsistencyModeToProto(coordinator->options().mode));
  response->set_num_workers(coordinator->options().num_workers);
  response->set_version(coordinator->version());
  response->set_next_step(progress.next_step);
  response->set_epoch(progress.epoch);
  response->set_examples_done(progress.examples_done);
  spdlog::info(
      "worker {} registered (incarnation {}, planned steps {}, at most {} "
      "examples a push), next step {}, epoch {}, examples_done {}",
      rank, request.incarnation(), request.planned_steps(),
      request.max_examples_per_push() == 0
          ? std::string("any")
          : absl::StrCat(request.max_examples_per_push()),
      progress.next_step, progress.epoch, progress.examples_done);
  return absl::OkStatus();
}

}  // namespace ps::server
