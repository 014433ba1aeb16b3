#include "update/log_preallocator.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace ps::update {

LogPreallocator::LogPreallocator(int fd, uint64_t written, uint64_t ahead,
                                 uint64_t chunk)
    : fd_(fd),
      ahead_(ahead),
      chunk_(std::max<uint64_t>(chunk, 1)),
      written_(written),
      appended_(0) {
  thread_ = std::thread([this] { Loop(); });
}

LogPreallocator::~LogPreallocator() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void LogPreallocator::Reserve(uint64_t end) {
  absl::MutexLock lock(&mu_);
  appended_ = std::max(appended_, end);
  // A write of zeros under way below `end` finishes first; none starts
  // below it afterwards.
  mu_.Await(absl::Condition(
      +[](LogPreallocator* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
        return !p->writing_ || p->writing_from_ >= p->appended_;
      },
      this));
  written_ = std::max(written_, end);
}

uint64_t LogPreallocator::written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

void LogPreallocator::WaitUntilAhead() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](LogPreallocator* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
        return p->failed_ || (!p->writing_ && !p->filling_ &&
                              p->written_ >= p->appended_ + p->ahead_ / 2);
      },
      this));
}

void LogPreallocator::Loop() {
  const std::string zeros(chunk_, '\0');
  absl::MutexLock lock(&mu_);
  for (;;) {
    // Woken once the lead falls to half of `ahead`, then filled up to
    // `ahead`: one wake-up per ahead / 2 bytes appended, not per append.
    mu_.Await(absl::Condition(
        +[](LogPreallocator* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
          return p->stop_ ||
                 (!p->failed_ && p->written_ < p->appended_ + p->ahead_ &&
                  (p->filling_ || p->written_ < p->appended_ + p->ahead_ / 2));
        },
        this));
    if (stop_) return;
    filling_ = true;
    // Never below what the appender reserved.
    written_ = std::max(written_, appended_);
    const uint64_t from = written_;
    const uint64_t n = std::min(chunk_, appended_ + ahead_ - from);
    writing_ = true;
    writing_from_ = from;
    mu_.Unlock();
    bool ok = true;
    for (uint64_t done = 0; ok && done < n;) {
      const ssize_t w = ::pwrite(fd_, zeros.data(), n - done,
                                 static_cast<off_t>(from + done));
      if (w < 0 && errno == EINTR) continue;
      ok = w > 0;
      if (ok) done += static_cast<uint64_t>(w);
    }
    mu_.Lock();
    writing_ = false;
    if (!ok) {
      failed_ = true;
    } else {
      // The appender may have reserved beyond these bytes meanwhile.
      written_ = std::max(written_, from + n);
      filling_ = written_ < appended_ + ahead_;
    }
  }
}

}  // namespace ps::update
