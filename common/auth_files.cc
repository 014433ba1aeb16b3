#include "common/auth_files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// Far above any certificate chain or key; bounds what a wrong path (a
// device, a huge file) makes us read.
constexpr std::streamsize kMaxFileBytes = 1 << 20;

absl::StatusOr<std::string> ReadSmallFile(absl::string_view source,
                                          const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": empty path"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": cannot read ", path, ": ", std::strerror(errno)));
  }
  std::string text(kMaxFileBytes + 1, '\0');
  in.read(text.data(), kMaxFileBytes + 1);
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": cannot read ", path));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > static_cast<size_t>(kMaxFileBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", path, " is larger than ", kMaxFileBytes, " bytes"));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(absl::string_view source,
                                        const std::string& path,
                                        absl::string_view kind) {
  absl::StatusOr<std::string> text = ReadSmallFile(source, path);
  if (!text.ok()) return text.status();
  // "-----BEGIN CERTIFICATE-----", "-----BEGIN EC PRIVATE KEY-----", ...
  for (size_t at = text->find("-----BEGIN "); at != std::string::npos;
       at = text->find("-----BEGIN ", at + 1)) {
    const size_t end = text->find("-----", at + 11);
    if (end != std::string::npos &&
        absl::StrContains(absl::string_view(*text).substr(at, end - at),
                          kind)) {
      return text;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": ", path, " holds no PEM ", kind,
                   " (\"-----BEGIN ... ", kind, "-----\")"));
}

absl::StatusOr<std::string> ReadTokenFile(absl::string_view source,
                                          const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(source, path);
  if (!text.ok()) return text.status();
  const std::string token(absl::StripAsciiWhitespace(*text));
  if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the token in ", path, " has ", token.size(),
                     " characters; it must have ", kMinTokenLength, " to ",
                     kMaxTokenLength, " (e.g. `openssl rand -hex 32`)"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": the token in ", path,
          " must be visible ASCII characters only (no spaces or control "
          "characters)"));
    }
  }
  return token;
}

bool TokensEqual(absl::string_view presented, absl::string_view expected) {
  // The length is no secret: every token the launcher makes has the same.
  if (presented.size() != expected.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    difference |= static_cast<unsigned char>(presented[i] ^ expected[i]);
  }
  return difference == 0;
}

}  // namespace ps
