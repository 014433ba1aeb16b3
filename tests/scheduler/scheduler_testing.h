#ifndef PS_TESTS_SCHEDULER_SCHEDULER_TESTING_H_
#define PS_TESTS_SCHEDULER_SCHEDULER_TESTING_H_

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <system_error>

namespace ps::testing {

// What the tasks of a scheduler's job wrote to `dir`: each file's name and
// its contents (tests/scheduler/place_program.cc, torch_program.py).
inline std::map<std::string, std::string> FilesIn(const std::string& dir) {
  std::map<std::string, std::string> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    std::ifstream in(entry.path());
    files[entry.path().filename()] = std::string(
        std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return files;
}

}  // namespace ps::testing

#endif  // PS_TESTS_SCHEDULER_SCHEDULER_TESTING_H_
