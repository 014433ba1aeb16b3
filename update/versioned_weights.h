#ifndef PS_UPDATE_VERSIONED_WEIGHTS_H_
#define PS_UPDATE_VERSIONED_WEIGHTS_H_

#include <memory>
#include <vector>

#include "absl/types/span.h"

namespace ps::update {

// One slice's weights as versions that pulls share instead of copying.
//
// A pull takes the current version (Share: a reference, no copy) and sends
// it straight from that memory, however long the network takes. An update
// writes in place when nobody else holds the current version, which is the
// usual case (a worker's pull has ended before its next push is applied);
// otherwise it writes a copy, which becomes current, and the pulls still
// sending the old version see it unchanged. A version nobody holds any more
// goes back to a small pool for the next copy, so copy-on-write neither
// allocates nor page-faults a fresh slice-sized buffer.
//
// Not thread-safe: the owner (ShardStore) calls Share under its slice's
// reader lock (Share may run concurrently with Share) and the rest under
// its writer lock. Shared versions are read-only, may be released on any
// thread and may outlive this object.
class VersionedWeights {
 public:
  using Version = std::shared_ptr<const std::vector<float>>;

  explicit VersionedWeights(std::vector<float> initial);

  VersionedWeights(const VersionedWeights&) = delete;
  VersionedWeights& operator=(const VersionedWeights&) = delete;

  // The current version; an update never changes it once shared.
  Version Share() const { return current_; }
  const std::vector<float>& values() const { return *current_; }

  // The current values, writable: in place if only this object holds them,
  // else in a copy that becomes the current version.
  absl::Span<float> Writable();

  // Replaces the values (e.g. from a checkpoint), copy-on-write like
  // Writable. `values` must have as many elements as the slice.
  void Assign(absl::Span<const float> values);

  // Whether the last Writable or Assign had to copy (for tests).
  bool last_write_copied() const { return last_write_copied_; }

 private:
  class Pool;

  // Writable's and Assign's common part: the buffer to write, copying the
  // current values into it only if `keep_values`.
  absl::Span<float> PrepareWrite(bool keep_values);
  // A version whose buffer goes back to the pool when released.
  std::shared_ptr<std::vector<float>> Wrap(std::vector<float> values) const;

  const std::shared_ptr<Pool> pool_;
  std::shared_ptr<std::vector<float>> current_;
  bool last_write_copied_ = false;
};

}  // namespace ps::update

#endif  // PS_UPDATE_VERSIONED_WEIGHTS_H_
