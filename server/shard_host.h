#ifndef PS_SERVER_SHARD_HOST_H_
#define PS_SERVER_SHARD_HOST_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "server/checkpointer.h"
#include "server/request_header.h"
#include "server/update_coordinator.h"
#include "update/shard_store.h"

namespace ps::server {

// What a shard holds once its model is declared: the partition's slices,
// the coordinator of their updates and their checkpoints. Members are
// destroyed in reverse order, each before what it uses.
struct DeclaredShard {
  std::unique_ptr<update::ShardStore> store;
  std::unique_ptr<UpdateCoordinator> coordinator;
  std::unique_ptr<Checkpointer> checkpointer;  // Null: no checkpoints.
  // What every request's header is checked against.
  ShardIdentity identity;
  // Who declared the model, for errors ("rank 0", "the checkpoint ...").
  std::string declared_by;

  const ModelSpec& model() const { return store->partition().model(); }
};

// Holds a shard's model-dependent state, which a server starts without:
// the first declaration from rank 0 builds it (or a restored checkpoint
// does, before serving), and it is immutable once built.
//
// Thread-safe. get() is a lock-free read; Declare serializes builders.
class ShardHost {
 public:
  // Builds the shard for a validated declaration.
  using Builder = std::function<absl::StatusOr<std::unique_ptr<DeclaredShard>>(
      const ModelSpec&)>;

  ShardHost(Builder builder, DeclarationLimits limits);
  ~ShardHost();

  ShardHost(const ShardHost&) = delete;
  ShardHost& operator=(const ShardHost&) = delete;

  // Installs a shard built elsewhere (restored from a checkpoint, or a
  // test's), before serving. Once only.
  void Install(std::unique_ptr<DeclaredShard> shard);

  // `rank` declares `model`. Without a shard, rank 0's valid declaration
  // builds it; another rank gets Unavailable (it retries until rank 0 has
  // declared). With one, the declaration must equal the shard's
  // (FailedPrecondition naming the first difference). InvalidArgument for a
  // declaration that is malformed or over the limits.
  absl::StatusOr<DeclaredShard*> Declare(int rank, const ModelSpec& model);
  // As above, and `admit` (called under the host's lock, so registrations
  // are serialized) decides on the shard before the caller gets it; a shard
  // built here is installed only if `admit` says OK, so that a refused
  // Register leaves no model behind.
  absl::StatusOr<DeclaredShard*> Declare(
      int rank, const ModelSpec& model,
      absl::FunctionRef<absl::Status(DeclaredShard&)> admit);

  // The shard, or null before the model is declared.
  DeclaredShard* get() const { return shard_.load(std::memory_order_acquire); }
  // The shard, or FailedPrecondition for `what` (a request that needs one).
  absl::StatusOr<DeclaredShard*> Require(absl::string_view what) const;

  const DeclarationLimits& limits() const { return limits_; }

  // At exit: wakes the shard's waiting pulls and stops its updates
  // (UpdateCoordinator::Shutdown), so that calls still in flight end soon,
  // then writes its final checkpoint, unless it keeps none or still waits
  // for rank 0's initial values (it has nothing to keep). Nothing without a
  // shard. A failed write is logged by the checkpointer.
  void StopAndCheckpoint();

 private:
  const Builder builder_;
  const DeclarationLimits limits_;
  absl::Mutex mu_;
  std::unique_ptr<DeclaredShard> owned_ ABSL_GUARDED_BY(mu_);
  // owned_.get(), published once built.
  std::atomic<DeclaredShard*> shard_{nullptr};
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_HOST_H_
