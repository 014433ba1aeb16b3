// The control for public_header_test: the macros it looks for are defined
// by the gRPC and protobuf headers this build has.

#include "proto/parameter_server.pb.h"
// After the protobuf header on purpose.
#include "client/rpc_header_macros.h"
#include "gtest/gtest.h"

static_assert(PS_SAW_PROTOBUF_HEADER,
              "protobuf headers no longer define GOOGLE_PROTOBUF_VERSION: "
              "update client/rpc_header_macros.h");

// rpc_header_macros_grpc.cc holds the gRPC half (a translation unit of its
// own, so that protobuf's headers cannot define what gRPC's should).
TEST(RpcHeaderMacrosTest, CompiledMeansTheMacrosAreDefined) {}
