#include "deploy/local/rendezvous_auth.h"

#include "client/channel_auth.h"
#include "client/parameter_client.h"
#include "server/auth.h"

namespace ps {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
RendezvousServerCredentials(const AuthFiles& files) {
  if (!files.tls()) return grpc::InsecureServerCredentials();
  server::ServerAuthFlags flags;
  flags.tls_cert = files.server_cert;
  flags.tls_key = files.server_key;
  if (files.mtls()) flags.tls_client_ca = files.ca_cert;
  flags.token_file = files.token;
  absl::StatusOr<server::ServerAuth> auth = server::LoadServerAuth(flags);
  if (!auth.ok()) return auth.status();
  return server::MakeServerCredentials(*auth);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
RendezvousChannelCredentials(const AuthFiles& files) {
  ClientOptions options;
  if (files.tls()) {
    options.tls_ca_file = files.ca_cert;
    options.tls_cert_file = files.client_cert;
    options.tls_key_file = files.client_key;
    options.token_file = files.token;
  }
  return client_internal::MakeChannelCredentials(options);
}

}  // namespace ps
