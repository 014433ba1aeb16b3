#include "common/unique_fd.h"

#include <unistd.h>

namespace ps {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

bool UniqueFd::Close() {
  const int fd = release();
  return fd < 0 || ::close(fd) == 0;
}

}  // namespace ps
