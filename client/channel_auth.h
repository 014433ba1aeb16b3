#ifndef PS_CLIENT_CHANNEL_AUTH_H_
#define PS_CLIENT_CHANNEL_AUTH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/parameter_client.h"
#include "grpcpp/security/credentials.h"

namespace ps::client_internal {

// The client's side of server/auth.h: the channel credentials that
// ClientOptions' authentication fields ask for.

// Plaintext when tls_ca_file is empty; else TLS checking the servers'
// certificates against it, with this client's certificate if given, and
// the job token on every call if token_file is given. Reads the files now.
// InvalidArgument naming the ClientOptions field at fault.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ClientOptions& options);

// What may explain `error`, a connection that failed: a plaintext client
// or one without a certificate cannot tell a server that closes its
// handshake from any other closed connection, so this says what to check
// (empty when the error does not look like a refused handshake).
std::string ConnectionHint(const ClientOptions& options,
                           absl::string_view error);

}  // namespace ps::client_internal

#endif  // PS_CLIENT_CHANNEL_AUTH_H_
