#ifndef PS_SERVER_COLLECTIVE_TESTING_H_
#define PS_SERVER_COLLECTIVE_TESTING_H_

// Float32 values to and from a collective's little-endian bytes, for the
// collectives' tests.

#include <cstring>
#include <string>
#include <vector>

namespace ps::server {

inline std::string Bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

inline std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

}  // namespace ps::server

#endif  // PS_SERVER_COLLECTIVE_TESTING_H_
