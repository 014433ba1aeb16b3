// Part of rpc_header_macros_test: the narrowest gRPC header our code
// includes defines one of the macros public_header_test looks for.

#include "grpcpp/support/status.h"
// After the gRPC header on purpose.
#include "client/rpc_header_macros.h"

static_assert(PS_SAW_GRPC_HEADER,
              "gRPC headers no longer define the macros "
              "client/rpc_header_macros.h looks for: update it");
static_assert(!PS_SAW_PROTOBUF_HEADER,
              "grpcpp/support/status.h includes protobuf: pick a gRPC header "
              "that does not, so that each half is checked on its own");
