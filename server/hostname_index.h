#ifndef PS_SERVER_HOSTNAME_INDEX_H_
#define PS_SERVER_HOSTNAME_INDEX_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps::server {

// The shard index a Kubernetes StatefulSet pod carries in its hostname:
// "ps-server-3" -> 3. Used for --server_index=-1, so one pod template serves
// every shard. InvalidArgument naming the hostname if it does not end in
// "-<ordinal>".
absl::StatusOr<int> IndexFromHostname(absl::string_view hostname);

// The same, for this machine's hostname.
absl::StatusOr<int> IndexFromThisHostname();

}  // namespace ps::server

#endif  // PS_SERVER_HOSTNAME_INDEX_H_
