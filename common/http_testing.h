#ifndef PS_COMMON_HTTP_TESTING_H_
#define PS_COMMON_HTTP_TESTING_H_

// Plain-socket HTTP for tests of the /metrics endpoints and of the
// Prometheus server that scrapes them: no HTTP library of our own.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ps::testing {

// GETs http://127.0.0.1:`port``path_and_query` (HTTP/1.0, so the answer is
// neither chunked nor kept alive) and returns the body of a 200 answer.
// Unavailable when nothing answers (connection refused, timeout);
// FailedPrecondition naming the status line for any other answer.
absl::StatusOr<std::string> HttpGet(int port, absl::string_view path_and_query,
                                    absl::Duration timeout = absl::Seconds(10));

// A loopback port nothing listens on now, for a flag that takes a port
// number and cannot pick one itself. Another process may take it before the
// caller does; tests accept that small chance.
absl::StatusOr<int> UnusedLoopbackPort();

// A socket listening on a loopback port, so that the port is taken.
// Closed by the destructor.
class HeldPort {
 public:
  static absl::StatusOr<HeldPort> Listen();
  HeldPort(HeldPort&& other) noexcept;
  HeldPort& operator=(HeldPort&&) = delete;
  ~HeldPort();

  int port() const { return port_; }

 private:
  HeldPort(int fd, int port) : fd_(fd), port_(port) {}
  int fd_;
  int port_;
};

}  // namespace ps::testing

#endif  // PS_COMMON_HTTP_TESTING_H_
