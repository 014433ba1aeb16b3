#ifndef PS_DEPLOY_LOCAL_RENDEZVOUS_AUTH_H_
#define PS_DEPLOY_LOCAL_RENDEZVOUS_AUTH_H_

#include <memory>

#include "absl/status/statusor.h"
#include "deploy/local/generated_auth.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace ps {

// The rendezvous of a job run with --auth is secured as its servers are,
// with this host's files of the job's CA (GeneratedAuth with a job CA):
// host 0 serves it with its server certificate (and with mTLS asks for a
// client certificate of the CA), every host's launcher checks that
// certificate and sends the job token on every call. So the hosts' plan and
// server lists are neither read nor changed by whoever lacks the job's CA.
// Empty `files` (no --auth): plaintext, as servers without --auth are.
//
// Errors: InvalidArgument naming the file that cannot be read.

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
RendezvousServerCredentials(const AuthFiles& files);

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
RendezvousChannelCredentials(const AuthFiles& files);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RENDEZVOUS_AUTH_H_
