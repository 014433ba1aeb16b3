#ifndef PS_COMMON_CLUSTER_ADDRESS_H_
#define PS_COMMON_CLUSTER_ADDRESS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// Where the servers are and who this process is, from the ways a cluster
// manager tells it: an explicit list, a name pattern plus a count (a
// Kubernetes StatefulSet behind a headless Service), the pod's hostname (its
// StatefulSet ordinal) or $JOB_COMPLETION_INDEX (an Indexed Job's rank).
//
// Pure functions of their arguments: no environment or DNS lookups, so main()
// reads the flag or variable and tests feed any text. Every input comes from
// outside, so each bad one is an InvalidArgument that names the offending
// text and what was expected.

// Checks one "host:port" address: host a DNS name (RFC 1123 labels), an IPv4
// address or a bracketed IPv6 address; port a decimal number in [1, 65535].
absl::Status ValidateServerAddress(absl::string_view address);

// Splits "h:p,h:p,..." into its addresses, each validated as above. Spaces
// around an entry are ignored; an empty entry or an address given twice is an
// error (two shards cannot live at one endpoint).
absl::StatusOr<std::vector<std::string>> ParseServerList(
    absl::string_view list);

// Expands a pattern such as "ps-server-{index}.ps-server:7000" into `count`
// addresses, replacing every "{index}" with 0 .. count-1. The pattern must
// contain "{index}" and no other braces; `count` must be in [1, 4096]; each
// result is validated as above.
absl::StatusOr<std::vector<std::string>> ExpandServerPattern(
    absl::string_view pattern, int count);

// The ordinal of a StatefulSet pod from its hostname: "ps-server-3" -> 3.
// A fully qualified name ("ps-server-3.ps-server.ns.svc") is accepted; only
// its first label counts. The ordinal is the decimal number after the last
// '-', without a leading zero or sign, after a non-empty name.
absl::StatusOr<int> OrdinalFromHostname(absl::string_view hostname);

// The rank of an Indexed Job pod from the value of $JOB_COMPLETION_INDEX, as
// getenv() returns it: nullptr (unset) and anything but a non-negative
// decimal int are errors.
absl::StatusOr<int> RankFromEnv(const char* value);

// Checks a job id (--job_id): empty, or at most 128 letters, digits, '.',
// '_' and '-', so that it reads well in logs and errors.
absl::Status ValidateJobId(absl::string_view job_id);

}  // namespace ps

#endif  // PS_COMMON_CLUSTER_ADDRESS_H_
