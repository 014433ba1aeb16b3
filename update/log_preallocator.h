#ifndef PS_UPDATE_LOG_PREALLOCATOR_H_
#define PS_UPDATE_LOG_PREALLOCATOR_H_

#include <cstdint>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps::update {

// Keeps the bytes just past a file's end written (with zeros) ahead of an
// appender, on a thread of its own, so that appends overwrite blocks the
// file already has instead of growing it: growing a file costs several
// times what overwriting costs (bench/README.md, "What the update log
// costs"), and that cost moves off the appender's path.
//
// The appender calls Reserve(end) before writing up to offset `end`; from
// then on this class never writes below `end`, and it waits for a write of
// its own that reaches below `end` to finish first, so the two never
// write the same bytes. The zeros beyond the appender's last byte are not
// records (update/update_log.h: a reader stops at the first offset that
// holds no whole record of the file).
//
// Thread-safe. Borrows `fd`, which must stay open until this is destroyed;
// the destructor stops and joins the thread. A failed write of zeros only
// stops preallocating (the appender then grows the file itself).
class LogPreallocator {
 public:
  // Keeps [appended end, appended end + `ahead`) written, from `written`
  // on (the file's bytes before it exist already), in writes of at most
  // `chunk` bytes; it starts writing when fewer than `ahead` / 2 bytes are
  // left ahead, so that it wakes once per `ahead` / 2 bytes appended.
  LogPreallocator(int fd, uint64_t written, uint64_t ahead,
                  uint64_t chunk = uint64_t{1} << 20);
  ~LogPreallocator();

  LogPreallocator(const LogPreallocator&) = delete;
  LogPreallocator& operator=(const LogPreallocator&) = delete;

  // The appender is about to write up to offset `end`: returns once no
  // write of zeros below `end` is under way and none will start.
  void Reserve(uint64_t end) ABSL_LOCKS_EXCLUDED(mu_);

  // The file's end as this class wrote it (what it has written, or the
  // appender reserved).
  uint64_t written() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the thread has nothing to do: at least `ahead` / 2 bytes
  // past the appended end written and no fill under way (or writing
  // failed). For tests.
  void WaitUntilAhead() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();

  const int fd_;
  const uint64_t ahead_;
  const uint64_t chunk_;
  mutable absl::Mutex mu_;
  // Bytes [0, written_) exist (or are the appender's to write).
  uint64_t written_ ABSL_GUARDED_BY(mu_);
  // The appender's reserved end.
  uint64_t appended_ ABSL_GUARDED_BY(mu_);
  // A write of zeros to [writing_from_, written_ + ...) is under way.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t writing_from_ ABSL_GUARDED_BY(mu_) = 0;
  // Writing up to appended_ + ahead_, begun when the lead fell to half.
  bool filling_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ps::update

#endif  // PS_UPDATE_LOG_PREALLOCATOR_H_
