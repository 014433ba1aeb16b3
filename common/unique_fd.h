#ifndef PS_COMMON_UNIQUE_FD_H_
#define PS_COMMON_UNIQUE_FD_H_

namespace ps {

// Owns a file descriptor (a file, a socket): closes it when destroyed, unless
// released first. -1 owns nothing. Movable, not copyable.
//
// Not thread-safe: one owner at a time, as with std::unique_ptr.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }

  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Gives up ownership: the caller closes what this returns.
  int release();
  // Closes the descriptor owned (errors ignored), then owns `fd`.
  void reset(int fd = -1);
  // Closes now and owns nothing afterwards; false if close(2) failed (errno
  // says why): on a file, a failed close can be a failed write. True if
  // nothing was owned.
  bool Close();

 private:
  int fd_ = -1;
};

}  // namespace ps

#endif  // PS_COMMON_UNIQUE_FD_H_
