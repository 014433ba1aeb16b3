#ifndef PS_SERVER_SHARD_BUILDER_H_
#define PS_SERVER_SHARD_BUILDER_H_

#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "server/server_config.h"
#include "server/server_metrics.h"
#include "server/shard_host.h"
#include "update/checkpoint.h"

namespace ps::server {

// Builds a shard (DeclaredShard) as the server's configuration says, from
// rank 0's declaration or from a checkpoint: its slices (ShardStore) with
// the optimizer the flags or the declaration give, their coordinator and,
// with --checkpoint_dir, their checkpointer.
//
// Thread-compatible: set_metrics comes before the first build; builds may
// then run from any thread. `config` must outlive the builder and every
// shard it builds.
class ShardBuilder {
 public:
  // Every shard's coordinator calls `on_finished` once the job is over
  // (CoordinatorOptions::on_finished): OK when every worker is done, the
  // failure under --on_worker_failure=fail.
  ShardBuilder(const ServerConfig& config,
               std::function<void(const absl::Status&)> on_finished);

  ShardBuilder(const ShardBuilder&) = delete;
  ShardBuilder& operator=(const ShardBuilder&) = delete;

  // Where restores and checkpoints written are counted; null: nowhere.
  // Shared with every shard built, whose checkpointer counts in it as long
  // as it lives.
  void set_metrics(std::shared_ptr<ServerMetrics> metrics) {
    metrics_ = std::move(metrics);
  }

  // The shard of `model`, a validated declaration. FailedPrecondition when
  // the optimizer flags given contradict a declared optimizer
  // (ResolveOptimizer).
  absl::StatusOr<std::unique_ptr<DeclaredShard>> FromDeclaration(
      const ModelSpec& model) const;

  // The shard of `checkpoint.checkpoint.model`, restored to the
  // checkpoint's state; errors name the checkpoint's path.
  absl::StatusOr<std::unique_ptr<DeclaredShard>> FromCheckpoint(
      const update::LoadedCheckpoint& checkpoint) const;

  // The shard the server starts with: with --checkpoint_dir, built from the
  // checkpoint ChooseCheckpoint picks for --restore and --extend; null when
  // there is none to start from (rank 0's declaration will build it).
  // ChooseCheckpoint's errors and FromCheckpoint's.
  absl::StatusOr<std::unique_ptr<DeclaredShard>> AtStart() const;

  // FromDeclaration, as ShardHost calls it. The builder must outlive it.
  ShardHost::Builder ForDeclarations() const;

 private:
  absl::StatusOr<std::unique_ptr<DeclaredShard>> Build(
      const ModelSpec& model, const update::LoadedCheckpoint* checkpoint) const;

  const ServerConfig& config_;
  const std::function<void(const absl::Status&)> on_finished_;
  std::shared_ptr<ServerMetrics> metrics_;
};

// The identity a checkpoint of this shard carries (and must carry to be
// restored here).
update::CheckpointIdentity CheckpointIdentityOf(const ServerConfig& config);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_BUILDER_H_
