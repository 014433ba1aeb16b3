#ifndef PS_BENCH_GRPC_ECHO_H_
#define PS_BENCH_GRPC_ECHO_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "bench/measure.h"

namespace ps::bench {

// The raw gRPC baseline: `size` bytes a round uploaded as a client stream of
// `chunk_bytes` chunks, then downloaded back as a server stream of such
// chunks (2 * size bytes a round), through a trivial Echo service served by
// this process on 127.0.0.1 with its own grpc::Server. Same channel and
// message limits as the parameter client and server; the bytes are copied
// into and out of the messages as ours are, but nothing is validated or
// computed. The server's threads run on `server_cpus` (empty: any).
absl::StatusOr<Measurement> MeasureGrpcEcho(
    const MeasureOptions& options, uint64_t size, uint64_t chunk_bytes,
    absl::Span<const int> server_cpus = {});

}  // namespace ps::bench

#endif  // PS_BENCH_GRPC_ECHO_H_
