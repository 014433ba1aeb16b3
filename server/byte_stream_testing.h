#ifndef PS_SERVER_BYTE_STREAM_TESTING_H_
#define PS_SERVER_BYTE_STREAM_TESTING_H_

#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace ps::server::testing {

// A one-slice message holding `text`, and back: what the stream services'
// tests send through their echo handlers.
inline grpc::ByteBuffer TextMessage(const std::string& text) {
  grpc::Slice slice(text);
  return grpc::ByteBuffer(&slice, 1);
}

inline std::string MessageText(const grpc::ByteBuffer& message) {
  std::vector<grpc::Slice> slices;
  std::string text;
  if (!message.Dump(&slices).ok()) return text;
  for (const grpc::Slice& s : slices) {
    text.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return text;
}

}  // namespace ps::server::testing

#endif  // PS_SERVER_BYTE_STREAM_TESTING_H_
