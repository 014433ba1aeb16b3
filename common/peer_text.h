#ifndef PS_COMMON_PEER_TEXT_H_
#define PS_COMMON_PEER_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace ps {

// Bytes of a peer's string that errors and log lines echo at most.
inline constexpr size_t kPeerTextBytes = 64;

// A string a peer sent (a job id, a tensor name, a method), made safe to
// echo in an error or a log line: control characters, '\\', '"' and
// non-ASCII bytes are escaped C-style ("\n", "\x7f"), so that a peer cannot
// forge a log line or a terminal escape; and only the first `max_bytes` are
// kept, the rest named by its size ("... (1048576 bytes)"), so that a peer
// cannot make the server write what it sent a second time.
std::string PeerText(absl::string_view text, size_t max_bytes = kPeerTextBytes);

}  // namespace ps

#endif  // PS_COMMON_PEER_TEXT_H_
