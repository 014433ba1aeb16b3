#ifndef PS_COMMON_AUTH_FILES_H_
#define PS_COMMON_AUTH_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// The files servers and clients authenticate each other with: PEM
// certificates and keys for TLS, and a job token file. Both sides read them
// through these functions, so that they agree on what a token may hold.
//
// `source` names where the path came from ("--token_file",
// "$PS_TOKEN_FILE"); every error starts with it and names the file.

// How a client presents the job token on every call, and the server finds
// it: gRPC metadata "authorization: Bearer <token>".
inline constexpr absl::string_view kTokenMetadataKey = "authorization";
inline constexpr absl::string_view kTokenMetadataPrefix = "Bearer ";

// Shorter tokens can be guessed; the launcher makes 64 hex characters.
inline constexpr size_t kMinTokenLength = 16;
inline constexpr size_t kMaxTokenLength = 4096;

// Reads a PEM file that must hold a block `-----BEGIN <what>` for some
// `what` containing `kind` ("CERTIFICATE", "PRIVATE KEY"): catches a
// swapped, empty or truncated file before gRPC refuses it without a reason.
absl::StatusOr<std::string> ReadPemFile(absl::string_view source,
                                        const std::string& path,
                                        absl::string_view kind);

// Reads a token file: the token is its content without surrounding
// whitespace (a trailing newline is usual), kMinTokenLength to
// kMaxTokenLength visible ASCII characters (what a gRPC metadata value may
// hold).
absl::StatusOr<std::string> ReadTokenFile(absl::string_view source,
                                          const std::string& path);

// Whether `presented` equals `expected`, in a time that does not depend on
// where they differ (so that timing does not reveal a token's prefix).
bool TokensEqual(absl::string_view presented, absl::string_view expected);

}  // namespace ps

#endif  // PS_COMMON_AUTH_FILES_H_
