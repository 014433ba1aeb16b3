#ifndef PS_UPDATE_RANGE_POOL_H_
#define PS_UPDATE_RANGE_POOL_H_

#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace ps::update {

// A small fixed pool of helper threads that run the pieces of a loop
// alongside the thread that asked, so that one large slice's update uses
// every core instead of one: a large slice's update on one thread held up
// its step (bench/README.md, "Server memory and the update").
//
// The caller of Run always works on its own loop and only waits for pieces
// a helper already started, so Run may be called from several threads at
// once and from inside a piece (a slice loop whose pieces split their
// elements) without deadlock. Which thread runs a piece is not fixed; a
// loop whose pieces write disjoint data gives the same bits however it is
// cut or scheduled.
//
// Thread-safe. Owns its helper threads; the destructor joins them and must
// not run while a Run is under way.
class RangePool {
 public:
  // `threads` counts the calling thread: threads - 1 helpers are started
  // (none when threads <= 1, and Run runs every piece on the caller).
  explicit RangePool(int threads);
  ~RangePool();

  RangePool(const RangePool&) = delete;
  RangePool& operator=(const RangePool&) = delete;

  // Threads that run pieces, the caller included.
  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Runs fn(i) once for each i in [0, n); returns after every call has
  // returned.
  void Run(size_t n, absl::FunctionRef<void(size_t)> fn);

  // Runs fn(begin, end) over disjoint ranges covering [0, n): ranges of at
  // most kMaxRange elements, at least threads() of them when that leaves
  // each at least kMinRange elements (below that a thread costs more than
  // it saves).
  void ForEachRange(size_t n, absl::FunctionRef<void(size_t, size_t)> fn);

  static constexpr size_t kMaxRange = size_t{1} << 20;
  static constexpr size_t kMinRange = size_t{1} << 16;

 private:
  // One Run: its pieces are claimed in order. Fields guarded by mu_.
  struct Loop {
    absl::FunctionRef<void(size_t)> fn;
    size_t n = 0;
    size_t next = 0;      // Next unclaimed piece.
    size_t finished = 0;  // Pieces that returned.
  };

  // Claims the next piece of `loop` into *i; false if none is left. The
  // loop leaves the queue when its last piece is claimed.
  bool ClaimLocked(Loop* loop, size_t* i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWorkLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stop_ || !queue_.empty();
  }
  void HelperLoop();

  absl::Mutex mu_;
  // Loops with unclaimed pieces, oldest first.
  std::deque<Loop*> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;  // Constant after construction.
};

}  // namespace ps::update

#endif  // PS_UPDATE_RANGE_POOL_H_
