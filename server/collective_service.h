#ifndef PS_SERVER_COLLECTIVE_SERVICE_H_
#define PS_SERVER_COLLECTIVE_SERVICE_H_

#include <string>

#include "grpcpp/support/status.h"
#include "proto/parameter_server.pb.h"
#include "server/blocking_stream_service.h"
#include "server/byte_stream.h"
#include "server/collective_table.h"

namespace ps::server {

struct CollectiveServiceOptions {
  // --server_index, --num_workers, --job_id: what a request's header is
  // checked against.
  int server_index = 0;
  int num_workers = 1;
  std::string job_id;
  // The bytes of completed results kept for ranks that repeat a call.
  size_t cache_bytes = 64 << 20;
};

// The wire face of the shard's collectives (ps.proto Collectives): parses
// a CollectiveRequest, checks its header, runs it in a CollectiveTable and
// answers. Needs no declared model. Served as a method of a
// BlockingStreamService (AddTo), so that both transports serve it, with
// the same authentication as the shard's other methods.
//
// Thread-safe; each call blocks the handler thread that serves it until
// every rank called (or the caller goes away).
class CollectiveService {
 public:
  explicit CollectiveService(const CollectiveServiceOptions& options);

  // Serves "/ps.proto.Collectives/Collective" on `streams`, which must not
  // outlive this. Before the streams start.
  void AddTo(BlockingStreamService& streams);

  // One call, as its handler runs it.
  grpc::Status Serve(ByteStream& stream);

 private:
  const CollectiveServiceOptions options_;
  CollectiveTable table_;
};

}  // namespace ps::server

#endif  // PS_SERVER_COLLECTIVE_SERVICE_H_
