#include "server/shard_builder.h"

#include <sys/stat.h>

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/consistency_mode.h"
#include "common/partition.h"
#include "server/checkpoint_choice.h"
#include "server/checkpointer.h"
#include "server/update_coordinator.h"
#include "spdlog/spdlog.h"
#include "update/lr_schedule.h"
#include "update/optimizer.h"
#include "update/shard_store.h"

namespace ps::server {
namespace {

// When `path` was last written; now if the system cannot say.
absl::Time ModificationTime(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::Now();
  return absl::TimeFromTimespec(st.st_mtim);
}

}  // namespace

update::CheckpointIdentity CheckpointIdentityOf(const ServerConfig& config) {
  return {config.num_servers, config.server_index,
          std::string(ConsistencyModeName(config.coordinator.mode)),
          config.coordinator.num_workers};
}

ShardBuilder::ShardBuilder(const ServerConfig& config,
                           std::function<void(const absl::Status&)> on_finished)
    : config_(config), on_finished_(std::move(on_finished)) {}

absl::StatusOr<std::unique_ptr<DeclaredShard>> ShardBuilder::FromDeclaration(
    const ModelSpec& model) const {
  return Build(model, nullptr);
}

absl::StatusOr<std::unique_ptr<DeclaredShard>> ShardBuilder::FromCheckpoint(
    const update::LoadedCheckpoint& checkpoint) const {
  return Build(checkpoint.checkpoint.model, &checkpoint);
}

absl::StatusOr<std::unique_ptr<DeclaredShard>> ShardBuilder::AtStart() const {
  if (!config_.checkpoints.has_value()) return nullptr;
  absl::StatusOr<std::optional<update::LoadedCheckpoint>> found =
      ChooseCheckpoint(config_.checkpoints->dir, CheckpointIdentityOf(config_),
                       config_.restore);
  if (!found.ok()) return found.status();
  if (!found->has_value()) return nullptr;
  return FromCheckpoint(**found);
}

ShardHost::Builder ShardBuilder::ForDeclarations() const {
  return [this](const ModelSpec& model) { return FromDeclaration(model); };
}

absl::StatusOr<std::unique_ptr<DeclaredShard>> ShardBuilder::Build(
    const ModelSpec& model, const update::LoadedCheckpoint* checkpoint) const {
  absl::StatusOr<Partition> partition =
      Partition::Create(model, config_.num_servers);
  if (!partition.ok()) return partition.status();
  auto shard = std::make_unique<DeclaredShard>();
  absl::StatusOr<update::OptimizerConfig> optimizer = update::ResolveOptimizer(
      config_.optimizer, config_.optimizer_given, model.optimizer,
      checkpoint != nullptr ? absl::StrCat("the checkpoint ", checkpoint->path)
                            : std::string("rank 0"));
  if (!optimizer.ok()) return optimizer.status();
  absl::StatusOr<std::unique_ptr<update::ShardStore>> store =
      update::ShardStore::Create(*partition, config_.server_index, *optimizer);
  if (!store.ok()) return store.status();
  shard->store = *std::move(store);
  CoordinatorOptions options = config_.coordinator;
  if (model.optimizer.has_value()) {
    // A program that declares its optimizer sets the learning rate: each
    // push carries its scheduler's value, and one without is applied at
    // the declared rate. --lr_schedule is for the flags' optimizer (the
    // local launcher passes it whether given or not, so it is no error).
    absl::StatusOr<update::LearningRateSchedule> lr =
        update::LearningRateSchedule::Create(update::LrScheduleKind::kConstant,
                                             optimizer->learning_rate, 0);
    if (!lr.ok()) return lr.status();
    if (options.lr_schedule->kind() != update::LrScheduleKind::kConstant) {
      spdlog::warn(
          "--lr_schedule={} does not apply: the declaration carries the "
          "optimizer, whose learning rate the workers set",
          std::string(update::LrScheduleName(options.lr_schedule->kind())));
    }
    options.lr_schedule = *lr;
    spdlog::info("optimizer {} as declared", DescribeOptimizer(*optimizer));
  }
  // The shard outlives its coordinator's calls (gRPC stops first); a shard
  // still waiting for rank 0's values has nothing to keep.
  options.on_new_incarnation = [s = shard.get()] {
    if (s->checkpointer != nullptr && !s->store->awaiting_initial_values()) {
      s->checkpointer->RequestSoon();
    }
  };
  options.on_finished = on_finished_;
  absl::StatusOr<std::unique_ptr<UpdateCoordinator>> coordinator =
      UpdateCoordinator::Create(shard->store.get(), std::move(options));
  if (!coordinator.ok()) return coordinator.status();
  shard->coordinator = *std::move(coordinator);
  if (checkpoint != nullptr) {
    if (absl::Status s = shard->coordinator->Restore(checkpoint->checkpoint);
        !s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("cannot restore ", checkpoint->path, ": ", s.message()));
    }
    shard->declared_by = absl::StrCat("the checkpoint ", checkpoint->path);
    if (metrics_ != nullptr) {
      metrics_->RecordRestored();
      metrics_->RecordCheckpoint(checkpoint->checkpoint.version,
                                 ModificationTime(checkpoint->path));
    }
    spdlog::info("restored {}: version {}, {} tensors", checkpoint->path,
                 checkpoint->checkpoint.version, model.tensors.size());
    // Before serving: the updates acknowledged after the checkpoint.
    if (absl::StatusOr<uint64_t> replayed = shard->coordinator->ReplayLog();
        !replayed.ok()) {
      return absl::Status(
          replayed.status().code(),
          absl::StrCat("cannot replay the update log after ", checkpoint->path,
                       ": ", replayed.status().message()));
    }
  } else if (absl::Status s = shard->coordinator->StartFreshLog(); !s.ok()) {
    return s;
  }
  if (config_.checkpoints.has_value()) {
    UpdateCoordinator* c = shard->coordinator.get();
    CheckpointPolicy policy = *config_.checkpoints;
    if (metrics_ != nullptr) {
      policy.on_written = [metrics = metrics_](uint64_t version) {
        metrics->RecordCheckpoint(version, absl::Now());
      };
    }
    shard->checkpointer = std::make_unique<Checkpointer>(
        std::move(policy), [c] { return c->SnapshotForCheckpoint(); },
        [c] { return c->version(); }, c->version());
    // A fresh shard's log starts with a checkpoint of its first state, so
    // that every update is in some checkpoint or log file. A shard awaiting
    // rank 0's values has no state to keep yet: its log starts at its first
    // checkpoint after them.
    if (checkpoint == nullptr && !config_.coordinator.update_log_dir.empty() &&
        !shard->store->awaiting_initial_values()) {
      absl::StatusOr<std::string> first = shard->checkpointer->WriteNow();
      if (!first.ok()) return first.status();
    }
  }
  shard->identity = {partition->fingerprint(), config_.server_index,
                     config_.coordinator.num_workers, config_.job_id};
  for (const Slice& s : shard->store->slices()) {
    spdlog::debug("  slice {} [{}, {})", model.tensors[s.tensor_id].name,
                  s.offset, s.offset + s.num_elements);
  }
  return shard;
}

}  // namespace ps::server
