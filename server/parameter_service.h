#ifndef PS_SERVER_PARAMETER_SERVICE_H_
#define PS_SERVER_PARAMETER_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/blocking_stream_service.h"
#include "server/optimizer_state_service.h"
#include "server/rank_call_limiter.h"
#include "server/request_header.h"
#include "server/server_stats.h"
#include "server/shard_host.h"

namespace ps::server {

struct ServiceOptions {
  // This shard's index and the job's worker count (--server_index,
  // --num_workers): what requests are checked against before a model is
  // declared.
  int server_index = 0;
  int num_workers = 1;
  // Elements per pull chunk when the request asks for 0: 1 MiB of float32.
  uint64_t default_chunk_elements = 256 * 1024;
  // Upper bound on elements per chunk, so a response fits the gRPC message
  // limit whatever the client asks for.
  uint64_t max_chunk_elements = 16 * 1024 * 1024 - 1024;
  // Smallest chunk a client may ask a pull for, and send in a push (but for
  // a slice's last chunk): one-element chunks would cost a message each.
  // 1 KiB, the smallest a worker's --chunk_kb makes.
  uint64_t min_chunk_elements = 256;
  // The job this shard serves (--job_id): requests of another are refused.
  std::string job_id;
  // Pulls and pushes one rank may have open at once (0: no bound): a
  // worker holds a push-and-pull stream and at times a pull.
  int max_calls_per_rank = 8;
  // Pulls and pushes served at once, each on a thread of the service (0: no
  // bound); a call beyond gets RESOURCE_EXHAUSTED.
  int max_threads = 0;
  // A streaming call whose peer sends or takes nothing for this long is
  // cancelled (--stream_idle_timeout).
  absl::Duration stream_idle_timeout = absl::InfiniteDuration();
  // --non_finite_gradients=refuse: a push holding a NaN or an infinity is
  // refused whole (one more read of every pushed byte). Else it is taken,
  // and the update leaves those elements as they were.
  bool refuse_non_finite = true;
  // Where the calls are also counted for Prometheus; null: nowhere. Not
  // owned; must outlive the service.
  ServerMetrics* metrics = nullptr;
};

// The gRPC face of one shard (ps.proto.ParameterServer): converts messages
// to the plain classes' types, validates, calls ShardHost, ShardStore,
// PushStager and UpdateCoordinator, and maps absl::Status to grpc::Status.
// Nothing here decides policy.
//
// Until rank 0 declares the model (in its Register), every request but
// Register and Stats is refused; other ranks' Register is answered
// UNAVAILABLE, which they retry. Likewise while rank 0's initial values of
// kFromRank0 tensors are missing: rank 0 may then only push them.
//
// Every method is served by stream_service() (register it beside this
// service) as a stream of raw messages, parsed here, so that a malformed
// request is refused as INVALID_ARGUMENT naming its type (gRPC's own
// parsing answers INTERNAL with no message). Pull, Push and PushPull carry
// tensor bytes, serialized and parsed with common/chunk_wire.h: a push's
// bytes stay in the received buffers, where the update reads them
// (SliceGradient), a pull's are sent from a shared version of the weights.
// On the wire they are the proto's methods.
//
// Thread-safe: gRPC calls the handlers from many threads; the service keeps
// only thread-safe members. No lock is held while a stream is read or
// written. Does not own the host (it must outlive the service). The end of
// the job (every worker done, or one dead under --on_worker_failure=fail)
// is signalled by the coordinator's on_finished. Destroy it after the
// server shut down.
class ParameterService final
    : public proto::ParameterServer::WithGenericMethod_Register<
          proto::ParameterServer::WithGenericMethod_Pull<
              proto::ParameterServer::WithGenericMethod_Push<
                  proto::ParameterServer::WithGenericMethod_Heartbeat<
                      proto::ParameterServer::WithGenericMethod_Done<
                          proto::ParameterServer::WithGenericMethod_Stats<
                              proto::ParameterServer::
                                  WithGenericMethod_PushPull<
                                      proto::ParameterServer::
                                          WithGenericMethod_Barrier<
                                              proto::ParameterServer::
                                                  Service>>>>>>>> {
 public:
  ParameterService(ShardHost* host, const ServiceOptions& options);

  // Serves every method; the server must serve it too
  // (GrpcServerOptions::stream_service).
  BlockingStreamService* stream_service() { return &streams_; }

  // Tells registered workers, in Register and Heartbeat answers, where the
  // same-host transport serving stream_service()'s methods listens
  // (server/local_stream_server.h), and its TCP port for workers on other
  // hosts (0: none). Before the server starts.
  void AnnounceLocalEndpoint(std::string socket_name, std::string secret,
                             int tcp_port = 0);

  // Multi-line, for the Stats RPC and the exit report:
  //   server 0 mode sync version 1875
  //   pushes: ... / pulls: ...          (ServerStats)
  //   workers: 0=live 1=dead            (UpdateCoordinator::Report)
  //   worker 0: clock 1875, epoch 1, examples_done 30000
  //   examples per epoch: 0=60000 1=60000
  //   replayed pushes acknowledged, not applied: 0
  //   updates lost in restarts: 0
  //   staleness (updates: ...): ...
  std::string Report() const;
  // The same as fields, for --report_file; nullopt before a model is
  // declared.
  std::optional<ShardReport> ReportFields() const;

 private:
  // A Register's bytes: prechecked (server/register_precheck.h), then
  // parsed and served (server/register_handler.h) one at a time.
  grpc::Status RegisterBytes(ByteStream& stream);
  grpc::Status Heartbeat(const proto::HeartbeatRequest& request,
                         proto::HeartbeatResponse* response);
  grpc::Status Done(const proto::DoneRequest& request,
                    proto::DoneResponse* response);
  // Waits until every live rank reached the barrier, or `stream` ends.
  grpc::Status Barrier(const proto::BarrierRequest& request,
                       ByteStream& stream);
  grpc::Status Stats(proto::StatsResponse* response);

  grpc::Status PullBytes(ByteStream& stream);
  // The push path (server/parameter_service_push.cc).
  grpc::Status PushBytes(ByteStream& stream);
  grpc::Status PushPullBytes(ByteStream& stream);

  // OK if `header` comes from the process its rank registered here;
  // checked before a call takes one of the rank's slots.
  static absl::Status CheckCaller(const UpdateCoordinator& coordinator,
                                  const proto::RequestHeader& header);
  // `s` with "`what`: " before its message.
  static absl::Status Prefixed(absl::string_view what, const absl::Status& s);

  // Validates `header` against the declared shard (FailedPrecondition
  // before the model is declared) and returns the shard.
  absl::StatusOr<DeclaredShard*> Admit(const proto::RequestHeader& header,
                                       absl::string_view what) const;

  // Waits as the mode says, streams the weights and records the pull;
  // `start` is when the pull's latency began.
  grpc::Status AnswerPull(const proto::PullRequest& request, ByteStream& stream,
                          absl::Time start);
  absl::StatusOr<uint64_t> ServePull(const proto::PullRequest& request,
                                     ByteStream& stream, absl::Duration* wait,
                                     uint64_t* bytes);
  // Runs `wait`, which blocks until the consistency model lets step `step`
  // be served, and adds the time it took to each rank that held that step
  // up as it began (ps_server_wait_for_rank_seconds_total).
  absl::StatusOr<uint64_t> AwaitRecordingBlockers(
      const UpdateCoordinator& coordinator, uint64_t step,
      absl::FunctionRef<absl::StatusOr<uint64_t>()> wait);
  // Which call a push stream came on: Push, or the push half of PushPull
  // (whose worker took the weights it computed on with its previous call).
  enum class PushCall { kPush, kPushPull };
  // Takes a push stream and records it; on success `first` holds its
  // metadata (the first message without its chunk), on failure the status
  // says "push refused: ...".
  absl::StatusOr<uint64_t> ReceivePush(ByteStream& stream, PushCall call,
                                       proto::PushRequest* first);
  // Stages the stream, then commits it; `commit` is the time the commit
  // took.
  absl::StatusOr<uint64_t> StageAndCommit(ByteStream& stream, PushCall call,
                                          proto::PushRequest* first,
                                          uint64_t* bytes,
                                          absl::Duration* commit);

  ShardHost* const host_;
  const ServiceOptions options_;
  ServerStats stats_;
  RankCallLimiter calls_;
  // Held while a Register is parsed and served: parsing one costs many
  // times its bytes, so only one is parsed at a time.
  absl::Mutex register_mu_;
  // Written before serving only; empty: none.
  proto::LocalEndpoint local_endpoint_;
  // ps.proto OptimizerStates, served by streams_ beside this service.
  OptimizerStateService optimizer_states_;
  // Last: destroyed first, it waits for handlers that use the members above.
  BlockingStreamService streams_;
};

}  // namespace ps::server

#endif  // PS_SERVER_PARAMETER_SERVICE_H_
