#include "common/unique_fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "gtest/gtest.h"

namespace ps {
namespace {

// Whether `fd` is an open descriptor of this process.
bool IsOpen(int fd) { return fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

// A fresh descriptor: the read end of a pipe (the write end closed).
int NewFd() {
  int ends[2];
  EXPECT_EQ(pipe(ends), 0);
  close(ends[1]);
  return ends[0];
}

TEST(UniqueFdTest, ClosesWhatItOwnsWhenDestroyed) {
  const int fd = NewFd();
  {
    UniqueFd owner(fd);
    EXPECT_TRUE(owner.valid());
    EXPECT_EQ(owner.get(), fd);
    EXPECT_TRUE(IsOpen(fd));
  }
  EXPECT_FALSE(IsOpen(fd));
}

TEST(UniqueFdTest, ReleaseGivesUpOwnership) {
  const int fd = NewFd();
  {
    UniqueFd owner(fd);
    EXPECT_EQ(owner.release(), fd);
    EXPECT_FALSE(owner.valid());
  }
  EXPECT_TRUE(IsOpen(fd));
  close(fd);
}

TEST(UniqueFdTest, MovingTransfersOwnership) {
  const int fd = NewFd();
  UniqueFd first(fd);
  UniqueFd second(std::move(first));
  EXPECT_FALSE(first.valid());
  EXPECT_EQ(second.get(), fd);
  const int other = NewFd();
  UniqueFd third(other);
  third = std::move(second);  // Closes `other`, takes `fd`.
  EXPECT_FALSE(IsOpen(other));
  EXPECT_EQ(third.get(), fd);
  EXPECT_TRUE(IsOpen(fd));
  third.reset();
  EXPECT_FALSE(IsOpen(fd));
}

TEST(UniqueFdTest, ResetClosesTheOldAndOwnsTheNew) {
  const int a = NewFd();
  const int b = NewFd();
  UniqueFd owner(a);
  owner.reset(b);
  EXPECT_FALSE(IsOpen(a));
  EXPECT_EQ(owner.get(), b);
  owner.reset(b);  // The same descriptor again: kept open.
  EXPECT_TRUE(IsOpen(b));
}

TEST(UniqueFdTest, CloseReportsSuccessAndFailure) {
  const int fd = NewFd();
  UniqueFd owner(fd);
  EXPECT_TRUE(owner.Close());
  EXPECT_FALSE(owner.valid());
  EXPECT_FALSE(IsOpen(fd));
  EXPECT_TRUE(owner.Close());  // Owns nothing: nothing to fail.
  // A descriptor closed behind its owner's back: close(2) fails.
  const int stale = NewFd();
  UniqueFd broken(stale);
  close(stale);
  EXPECT_FALSE(broken.Close());
  EXPECT_EQ(errno, EBADF);
}

TEST(UniqueFdTest, DefaultOwnsNothing) {
  UniqueFd owner;
  EXPECT_FALSE(owner.valid());
  EXPECT_EQ(owner.get(), -1);
  EXPECT_EQ(owner.release(), -1);
}

}  // namespace
}  // namespace ps
