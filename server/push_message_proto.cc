#include "server/push_message_proto.h"

#include <cstdint>

#include "absl/types/span.h"

namespace ps::server {

static_assert(kProtocolVersionCurrent == proto::PROTOCOL_VERSION_CURRENT,
              "request_header.h must mirror the proto");
static_assert(kDTypeFloat32 == proto::DTYPE_FLOAT32,
              "request_header.h must mirror the proto");

RequestHeaderFields RequestHeaderFromProto(const proto::RequestHeader& h) {
  return {h.protocol_version(), h.partition_fingerprint(), h.worker_rank(),
          h.server_index(),     h.incarnation(),           h.job_id()};
}

PushMessage PushMessageFromProto(const proto::PushRequest& r,
                                 const absl::Cord& data) {
  PushMessage m;
  m.header = RequestHeaderFromProto(r.header());
  m.step = r.step();
  m.base_version = r.base_version();
  m.num_examples = r.num_examples();
  m.epoch = r.epoch();
  m.examples_done = r.examples_done();
  if (r.has_learning_rate()) m.learning_rate = r.learning_rate();
  m.initial_values = r.initial_values();
  m.has_chunk = r.has_chunk();
  if (m.has_chunk) {
    const proto::TensorChunk& c = r.chunk();
    m.chunk.tensor_id = c.tensor_id();
    m.chunk.dtype = c.dtype();
    m.chunk.shape = absl::MakeConstSpan(
        reinterpret_cast<const int64_t*>(c.shape().data()), c.shape_size());
    m.chunk.offset = c.offset();
    m.chunk.num_elements = c.num_elements();
    m.chunk.data = data;
  }
  return m;
}

}  // namespace ps::server
