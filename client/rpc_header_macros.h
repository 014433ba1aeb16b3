#ifndef PS_CLIENT_RPC_HEADER_MACROS_H_
#define PS_CLIENT_RPC_HEADER_MACROS_H_

// Whether any gRPC or protobuf header was included before this one: each
// such header defines at least one of these macros (checked against
// Debian's gRPC 1.51 and protobuf 3.21 by rpc_header_macros_test, so that a
// newer version that drops them fails loudly instead of passing quietly).

#if defined(GOOGLE_PROTOBUF_VERSION)
#define PS_SAW_PROTOBUF_HEADER 1
#else
#define PS_SAW_PROTOBUF_HEADER 0
#endif

#if defined(GRPC_SUPPORT_PORT_PLATFORM_H) ||      \
    defined(GRPC_IMPL_CODEGEN_PORT_PLATFORM_H) || \
    defined(GRPCPP_SUPPORT_CONFIG_H) || defined(GRPCPP_IMPL_CODEGEN_CONFIG_H)
#define PS_SAW_GRPC_HEADER 1
#else
#define PS_SAW_GRPC_HEADER 0
#endif

#endif  // PS_CLIENT_RPC_HEADER_MACROS_H_
