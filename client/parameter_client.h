#ifndef PS_CLIENT_PARAMETER_CLIENT_H_
#define PS_CLIENT_PARAMETER_CLIENT_H_

// The client library: what a training program links to train through the
// parameter servers. Nothing here exposes gRPC or protobuf.
//
// A training step with it, on every rank:
//
//   ps::ClientOptions options = *ps::ClientOptions::FromEnvironment();
//   auto client = *ps::ParameterClient::Connect(options);
//   ps::Registration reg = *client->Declare(model, planned_steps, batch);
//   ps::TensorValues weights;
//   client->Pull(reg.next_step, weights);             // or Broadcast
//   for (uint64_t step = reg.next_step; step < planned_steps; ++step) {
//     ... compute gradients from `weights` ...
//     auto push = client->StartStep({step, version, batch, cursor}, true);
//     push->Send(id, gradient) for every tensor, as it becomes ready;
//     version = *push->FinishWithPull(weights);       // weights for step + 1
//   }
//   client->Finish();
//
// What a step means depends on the servers' --mode (Registration::mode):
// - kSync: a push for step t is summed with every live rank's push for t
//   (in rank order, weighted by examples), and the weights for step t + 1
//   are answered once that sum is applied. Every rank sees the same weights
//   at every step.
// - kSsp: a push is applied when it arrives; the weights for step t are
//   answered once every live rank has pushed step t - 1 - staleness.
// - kAsync: a push is applied when it arrives; weights are answered at once.
//
// Retries, registration, heartbeats and the shards' restarts are handled
// inside: a call that fails has failed for good (the status says which shard
// and why).
//
// Exactly once: the shards record the DataCursor of each push they accept,
// and take a later push whose cursor does not move past it as a replay of a
// batch they already have (acknowledged, not applied). Every push must
// therefore carry a cursor beyond its rank's previous one.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/consistency_mode.h"
#include "common/model_spec.h"

namespace ps {

// How a tensor's values travel between this worker and the shards. The
// shards keep float32 weights and compute in float32 whatever is chosen,
// and a sync step still sums the ranks' (decoded) gradients in rank order,
// so a rerun gives the same bits.
struct Compression {
  enum class Kind {
    // Float32 both ways.
    kNone,
    // Gradients pushed and weights pulled as bfloat16 (half the bytes),
    // rounded to nearest, ties to even: 8 significant bits, float32's range.
    kBfloat16,
    // The same as IEEE float16: 11 significant bits; magnitudes below about
    // 6e-8 arrive as 0, above 65504 as infinite (and a push holding an
    // infinity is refused).
    kFloat16,
    // Each push of the tensor sends only its ceil(topk_ratio x elements)
    // largest-magnitude values of gradient + residual, as (index, value)
    // pairs; the values not sent are this client's residual, added to the
    // tensor's next push (error feedback). Weights are pulled as float32.
    kTopK,
  };
  Kind kind = Kind::kNone;
  // kTopK: the fraction of the elements sent, in (0, 1].
  double topk_ratio = 0.01;

  // The compression called `name` ("none", "bf16", "fp16", "topk": the
  // worker's --compression) with `topk_ratio`; InvalidArgument saying what
  // is wrong with either (the caller names its flag or argument).
  static absl::StatusOr<Compression> FromName(absl::string_view name,
                                              double topk_ratio);
};

struct ClientOptions {
  // "host:port" of every shard, shard i first.
  std::vector<std::string> servers;
  // This worker's rank in [0, number of workers); rank 0 declares the model.
  int rank = 0;
  // The job the servers must belong to (their --job_id; empty if they have
  // none).
  std::string job_id;
  // Elements per streamed chunk: 256K floats = 1 MiB.
  uint64_t chunk_elements = 256 * 1024;
  // How long Connect waits for every shard to accept a connection.
  absl::Duration connect_timeout = absl::Seconds(30);
  // A shard that is unreachable (down, restarting) or not ready (rank 0 has
  // not declared yet) is retried with exponential backoff from
  // `initial_backoff` to `max_backoff` for this long before a call fails.
  absl::Duration retry_timeout = absl::Seconds(120);
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  // How often the client tells every shard, between calls, that this rank
  // is alive and which steps it has done; zero: never (a rank that computes
  // longer than the shards' --worker_timeout between calls is then dead).
  absl::Duration heartbeat_period = absl::Seconds(1);
  // Reach shards over the frame transport they announce (on this host a
  // Unix socket, from other hosts the same frames over TCP: fewer copies
  // and thread hand-offs than gRPC); false: gRPC always. With TLS
  // (tls_ca_file) shards elsewhere are reached through gRPC either way.
  bool local_transport = true;
  // Every tensor's compression, unless ParameterClient::SetCompression
  // chose another for it.
  Compression compression;

  // Authentication, for servers started with the matching flags (all empty:
  // plaintext). Paths of files, read by Connect; InvalidArgument naming the
  // field for one that cannot be read or does not hold what it should.
  //
  // PEM certificate of the CA that signed the servers' certificates (their
  // --tls_cert): set, the client speaks TLS and refuses a server whose
  // certificate it does not sign.
  std::string tls_ca_file;
  // PEM certificate and private key of this client, for servers that
  // require one (--tls_client_ca: mutual TLS). Both or neither; need
  // tls_ca_file.
  std::string tls_cert_file;
  std::string tls_key_file;
  // The name every server's certificate must carry; empty: the host of its
  // address in `servers`. One name for every shard (e.g. "ps-server") lets
  // one certificate serve them all.
  std::string tls_server_name;
  // File holding the job token (the servers' --token_file), sent with every
  // call. Needs tls_ca_file: a token is never sent in plaintext.
  std::string token_file;

  // The options a launcher (deploy/local `launch -- PROGRAM`, a Kubernetes
  // Job) passes in the environment: PS_SERVERS, PS_RANK, PS_JOB_ID, and
  // where set PS_TLS_CA, PS_TLS_CERT, PS_TLS_KEY, PS_TLS_SERVER_NAME and
  // PS_TOKEN_FILE (file paths, never the secrets themselves). Without the
  // PS_ ranks, a task of `srun` or `mpirun` takes its rank from the
  // scheduler's variables (WorkerPlace). The other fields keep their
  // defaults. InvalidArgument naming every variable that is missing, or the
  // one that is malformed.
  static absl::StatusOr<ClientOptions> FromEnvironment();

  // Defaults but for the authentication fields, read from PS_TLS_CA,
  // PS_TLS_CERT, PS_TLS_KEY, PS_TLS_SERVER_NAME and PS_TOKEN_FILE where set:
  // for a program that names the servers itself (they are checked, as
  // always, by Connect).
  static ClientOptions AuthFromEnvironment();
};

// Where this worker stands among the job's, as the environment that
// ClientOptions::FromEnvironment reads says: the launcher's PS_RANK,
// PS_NUM_WORKERS, PS_LOCAL_RANK and PS_LOCAL_NUM_WORKERS, or without them
// Slurm's (srun) or Open MPI's (mpirun) variables, one worker per task.
struct WorkerPlace {
  int rank = 0;
  int num_workers = 1;
  int local_rank = 0;  // Among the workers of this host.
  int local_num_workers = 1;

  // InvalidArgument as FromEnvironment's.
  static absl::StatusOr<WorkerPlace> FromEnvironment();
};

// Where a rank is in the data: it has trained on `examples_done` examples
// of its share of epoch `epoch`. The client sends it with every push; the
// servers record it with the push they accept, and a rank that restarts
// gets back the position of its last accepted step, so that every example
// is counted once.
struct DataCursor {
  uint64_t epoch = 0;
  uint64_t examples_done = 0;
};

// What the servers told a rank that declared.
struct Registration {
  ConsistencyMode mode = ConsistencyMode::kSync;
  int num_workers = 0;
  // The step this rank continues from: 0 in a new job; for a rank that
  // restarted, where the servers say it stopped.
  uint64_t next_step = 0;
  // The data position recorded with this rank's last accepted push (the
  // smallest over the shards, so no example is skipped).
  DataCursor cursor;
};

// One float32 buffer per declared tensor, in declaration order
// (`values[id]` has the tensor's num_elements()). Calls that fill it resize
// it as needed.
using TensorValues = std::vector<std::vector<float>>;

// What a push says about its gradient besides the values.
struct StepInfo {
  // The step the gradient is for (the rank's clock).
  uint64_t step = 0;
  // The version of the weights it was computed from (what the pull
  // returned).
  uint64_t base_version = 0;
  // Examples the gradient averages over; a sync step weights ranks by it.
  uint32_t num_examples = 0;
  // The data position after this step.
  DataCursor cursor;
  // The learning rate to apply this gradient at (a scheduler's value for
  // the step), finite and >= 0; unset: the servers' schedule of the
  // declared (or their --learning_rate) one.
  std::optional<float> learning_rate;
};

// One tensor's optimizer state on the servers, gathered from every shard
// that holds part of it.
struct TensorOptimizerState {
  // Updates applied to the tensor: Adam's step t (its bias correction
  // counts them). Read: the smallest over the tensor's slices (in sync mode
  // they agree). Written to every slice.
  uint64_t update_count = 0;
  // The state vectors in the optimizer's order, each num_elements() floats
  // in the tensor's row-major order: "m" and "v" (Adam's first and second
  // moments), "momentum" (SGD with momentum: the velocity v in
  // v <- momentum * v + g, w <- w - lr * v); none for plain SGD and for
  // tensors declared assigned.
  std::vector<std::pair<std::string, std::vector<float>>> vectors;
};

// The servers' optimizer state of the declared model: what a
// torch.save-style checkpoint of the optimizer holds.
struct OptimizerState {
  OptimizerKind kind = OptimizerKind::kAdam;
  // Read: the version (updates applied) it was read at, the smallest over
  // the shards. Not read by a write.
  uint64_t version = 0;
  // One per declared tensor, by id.
  std::vector<TensorOptimizerState> tensors;
};

class StepPush;

// A training program's connection to every parameter-server shard.
//
// Every call fans out to the shards in parallel and fails if any shard
// fails, naming the shard. Everything the shards send is checked against
// the declaration, so a mismatched shard yields an error, never wrong
// weights.
//
// Thread-safety: Pull, StartStep, Broadcast, Barrier, Finish and the
// optimizer state calls may be called from any thread, but a rank's steps
// are meant to be issued one after another; Declare must come first and
// once. Destroying the client closes its connections (a rank that did not
// Finish is seen as dead by the shards after their --worker_timeout).
class ParameterClient {
 public:
  // Connects to every shard of `options.servers`, waiting up to
  // `options.connect_timeout`. InvalidArgument for bad options, Unavailable
  // naming a shard that did not answer, with the last connection error
  // (e.g. a failed TLS handshake) and what may cause it. A server that
  // refuses the job token answers the first call (Declare) with
  // Unauthenticated.
  static absl::StatusOr<std::unique_ptr<ParameterClient>> Connect(
      const ClientOptions& options);

  ~ParameterClient();
  ParameterClient(const ParameterClient&) = delete;
  ParameterClient& operator=(const ParameterClient&) = delete;

  // Declares the model this rank trains and registers the rank with every
  // shard. Rank 0's declaration creates the model on fresh shards (each
  // initialises its slices as the tensors' InitializerSpec says); every
  // other rank waits for it (up to retry_timeout) and must declare exactly
  // the same, or gets FailedPrecondition naming the first tensor that
  // differs. A shard restored from a checkpoint already holds a model and
  // refuses any other. `planned_steps`: steps this rank will train in all;
  // the servers' learning-rate schedule spans them. With `model.optimizer`
  // set, the servers run that optimizer (FailedPrecondition naming the flag
  // if a server was started with an optimizer flag that says otherwise);
  // unset, the servers' flags choose it. `max_examples_per_push`: the most
  // examples any of this rank's steps averages over (StepInfo::num_examples),
  // its batch size; the servers refuse a push that claims more
  // (InvalidArgument naming num_examples), so that no peer speaking in this
  // rank's name can outweigh the other ranks in a sync step. 0: no bound.
  absl::StatusOr<Registration> Declare(const ModelSpec& model,
                                       uint64_t planned_steps,
                                       uint32_t max_examples_per_push = 0);

  // The declared model; valid after Declare.
  const ModelSpec& model() const;
  // The id of the tensor called `name`, or NotFound.
  absl::StatusOr<int> TensorId(absl::string_view name) const;

  // For tensors declared InitializerSpec::FromRank0: on rank 0, uploads
  // `values` of those tensors (the other tensors' entries are not read);
  // the shards keep the first values they receive, so a restarted rank 0
  // cannot change them. Then, on every rank, fills `values` with the
  // weights for step Registration::next_step (0 in a new job, where they
  // hold rank 0's values bit for bit, in every mode), as Pull does. Other
  // ranks wait (in Declare) until rank 0's upload is complete. Collective:
  // every rank calls it, and it returns once every live rank has its copy
  // (it ends with a Barrier, which counts as one), so that no rank's first
  // push changes the weights before another rank pulled them. Rank 0 of a
  // new job calls it before its first pull or step when the model has
  // FromRank0 tensors (else FailedPrecondition).
  absl::Status Broadcast(TensorValues& values);

  // Sets how tensor `id` travels from now on (ClientOptions.compression
  // until then): pulls made and steps started after the call returns use
  // it. A tensor leaving kTopK drops its residual. Only this client's side
  // changes: ranks may choose differently. InvalidArgument for an unknown
  // id or a topk_ratio outside (0, 1]; FailedPrecondition before Declare.
  absl::Status SetCompression(int id, const Compression& compression);

  // Fills `weights` once the servers allow step `step` to proceed (see the
  // modes above). Returns the weights' version: updates applied, the
  // smallest over the shards.
  absl::StatusOr<uint64_t> Pull(uint64_t step, TensorValues& weights);

  // Opens step `info.step`'s push; see StepPush. With `pull_after`, the
  // push also brings back the weights for step + 1 (one call per shard and
  // step instead of two): finish it with FinishWithPull. The push must not
  // outlive the client.
  std::unique_ptr<StepPush> StartStep(const StepInfo& info, bool pull_after);

  // Pushes every tensor's gradient (`gradients[id]`) in one call.
  absl::Status Push(const StepInfo& info, const TensorValues& gradients);

  // Waits until every live rank that has not finished has called Barrier
  // as often as this one (ranks that died are not waited for).
  absl::Status Barrier();

  // The weights once every other rank has finished training too (called
  // Finish, made this call, or died): they hold every rank's last update.
  // `step` is this rank's clock (steps it trained).
  absl::StatusOr<uint64_t> PullFinal(uint64_t step, TensorValues& weights);

  // Tells the shards this rank is done; once every rank is, they exit.
  absl::Status Finish();

  // The servers' optimizer state (ps.proto OptimizerStates), each shard's
  // read at one point between two of its updates. Any rank may read; in
  // sync mode, a rank between its steps t - 1 and t reads every shard at
  // version t. DataLoss if a shard's answer does not fit the declaration.
  absl::StatusOr<OptimizerState> ReadOptimizerState();

  // Replaces the servers' optimizer state with `state` (every tensor, each
  // vector the servers' optimizer keeps for it, as ReadOptimizerState gives
  // them), leaving the weights as they are. Rank 0 only (the others get
  // FailedPrecondition): the servers hold one state for all ranks. With
  // `at_version`, a shard applies it only at that version (Aborted
  // otherwise): in sync mode rank 0 passes its next step before pushing
  // it, and no update of that step can come first. Each shard applies all
  // of its part or none, and answers once a checkpoint holding it is on
  // disk (if it keeps checkpoints), so that a restarted shard resumes with
  // it; the shards are written one after another, and an error leaves the
  // shards before it written: repeat the call. InvalidArgument for a
  // `state` that does not fit the declared model (tensors, sizes);
  // FailedPrecondition naming what differs from a shard's optimizer (kind,
  // vectors).
  absl::Status WriteOptimizerState(
      const OptimizerState& state,
      std::optional<uint64_t> at_version = std::nullopt);

 private:
  class Impl;
  explicit ParameterClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One step's push: a stream to every shard, fed tensor by tensor as the
// gradients become ready, so that sending the last layer's gradient
// overlaps computing the earlier layers'. A shard applies the push only if
// its stream covered every element it holds, so a push that did not send
// every tensor applies nothing anywhere. Repeating a step after an error is
// safe: the shards recognise a push they already took.
//
// Send may be called from one thread while the push's own threads stream;
// the memory passed to Send must stay valid and unchanged until Finish or
// FinishWithPull returns.
class StepPush {
 public:
  virtual ~StepPush() = default;

  // Queues the gradient of tensor `id` (num_elements floats) to the shards
  // that hold it. InvalidArgument (nothing sent) for an unknown id, a wrong
  // size, or a tensor sent twice.
  virtual absl::Status Send(int id, absl::Span<const float> gradient) = 0;

  // Waits for every shard; OK only if every shard took the push.
  virtual absl::Status Finish() = 0;

  // For a push started with pull_after: waits for every shard to take the
  // push and send the weights for step + 1 into `weights`. Returns their
  // version. On error `weights` is unspecified.
  virtual absl::StatusOr<uint64_t> FinishWithPull(TensorValues& weights) = 0;
};

}  // namespace ps

#endif  // PS_CLIENT_PARAMETER_CLIENT_H_
