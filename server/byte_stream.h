#ifndef PS_SERVER_BYTE_STREAM_H_
#define PS_SERVER_BYTE_STREAM_H_

#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"

namespace ps::server {

// One call as its handler sees it: raw messages read and written one at a
// time, each operation blocking until the transport completes it, whether
// the call came over gRPC (BlockingStreamService) or over the same-host
// transport (LocalStreamServer).
//
// Not thread-safe: only the call's handler thread uses it. Valid until the
// handler returns.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // The client's next message; false once it sent its last, or the call
  // ended.
  virtual bool Read(grpc::ByteBuffer* message) = 0;
  // False if the call ended before `message` could be sent. A transport may
  // gather small messages and send them with the next one, or before the
  // handler reads or waits (IsCancelled), or with the call's status.
  virtual bool Write(const grpc::ByteBuffer& message) = 0;
  // The client cancelled the call, its deadline passed, or the server is
  // shutting down.
  virtual bool IsCancelled() = 0;
};

// Reads and writes the call's messages; its status is the call's.
using StreamHandler = std::function<grpc::Status(ByteStream& stream)>;

// The handlers of a service's methods, by the name gRPC gives them on the
// wire ("/package.Service/Method"): one table for every transport.
//
// Add before serving; thread-safe for Find once serving started.
class StreamMethods {
 public:
  void Add(std::string method, StreamHandler handler) {
    handlers_[std::move(method)] = std::move(handler);
  }
  // Null for a method that was not added.
  const StreamHandler* Find(absl::string_view method) const {
    const auto it = handlers_.find(method);
    return it == handlers_.end() ? nullptr : &it->second;
  }

 private:
  absl::flat_hash_map<std::string, StreamHandler> handlers_;
};

}  // namespace ps::server

#endif  // PS_SERVER_BYTE_STREAM_H_
