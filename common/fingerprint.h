#ifndef PS_COMMON_FINGERPRINT_H_
#define PS_COMMON_FINGERPRINT_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace ps {

// 64-bit FNV-1a, folded incrementally. Stable across processes, machines and
// builds, unlike absl::Hash, so it can name a configuration on the wire.
class Fingerprint {
 public:
  Fingerprint& Add(absl::string_view bytes) {
    for (unsigned char c : bytes) {
      state_ = (state_ ^ c) * 0x100000001b3ULL;
    }
    return *this;
  }
  Fingerprint& Add(uint64_t value) {
    for (int i = 0; i < 8; ++i) {
      state_ = (state_ ^ ((value >> (8 * i)) & 0xff)) * 0x100000001b3ULL;
    }
    return *this;
  }
  uint64_t value() const { return state_; }

 private:
  uint64_t state_ = 0xcbf29ce484222325ULL;
};

}  // namespace ps

#endif  // PS_COMMON_FINGERPRINT_H_
