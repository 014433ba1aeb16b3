#include "worker/pipeline/link_routes.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/auth_files.h"
#include "common/cluster_address.h"
#include "common/tcp_frames.h"

namespace ps::worker::pipeline {
namespace {

constexpr absl::string_view kTcpHelloMagic = "paramserver stage link 1";
constexpr size_t kMaxSecretLength = 256;

// How this host lays out a 32-bit word in memory, e.g. "04030201" on a
// little-endian host.
std::string ByteOrder() {
  const uint32_t probe = 0x01020304;
  unsigned char bytes[sizeof(probe)];
  std::memcpy(bytes, &probe, sizeof(probe));
  return absl::StrFormat("%02x%02x%02x%02x", bytes[0], bytes[1], bytes[2],
                         bytes[3]);
}

bool Visible(absl::string_view text) {
  for (const char c : text) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<LinkAddress> ParseLinkAddress(absl::string_view flag,
                                             absl::string_view address) {
  if (absl::Status s = ValidateServerAddress(address); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", address, ": ", s.message()));
  }
  LinkAddress out;
  out.host = HostOfTarget(address);
  if (out.host.empty() ||
      !absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &out.port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", address, ": not HOST:PORT"));
  }
  return out;
}

absl::Status CheckLinkRoutes(const LinkRoutes& routes,
                             const PipelinePlace& place, bool tls) {
  if (!routes.listen.empty()) {
    if (place.last()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--stage_link_listen is for a stage with a next stage; this is ",
          place.ToString(), ", the last"));
    }
    if (absl::Status s =
            ParseLinkAddress("stage_link_listen", routes.listen).status();
        !s.ok()) {
      return s;
    }
  }
  if (!routes.previous.empty()) {
    if (place.first()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--stage_link_previous is for a stage with a previous stage; this "
          "is ",
          place.ToString(), ", the first"));
    }
    if (absl::Status s =
            ParseLinkAddress("stage_link_previous", routes.previous).status();
        !s.ok()) {
      return s;
    }
  }
  if (!routes.any_tcp()) return absl::OkStatus();
  if (tls) {
    return absl::InvalidArgumentError(
        "--stage_link_listen and --stage_link_previous carry activations "
        "between hosts unencrypted, which a job with TLS (--tls_ca) must not "
        "do: keep a replica's stages on one host");
  }
  if (routes.secret.size() < kMinLinkSecretLength ||
      routes.secret.size() > kMaxSecretLength || !Visible(routes.secret)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--stage_link_listen and --stage_link_previous need the job's link "
        "secret in $",
        kStageLinkSecretVariable, ": ", kMinLinkSecretLength, " to ",
        kMaxSecretLength, " visible characters (",
        routes.secret.empty() ? "it is not set" : "it is not", ")"));
  }
  return absl::OkStatus();
}

std::string TcpHello(absl::string_view identity, absl::string_view secret) {
  return absl::StrCat(kTcpHelloMagic, "\n", identity, "\n", ByteOrder(), "\n",
                      secret);
}

size_t MaxTcpHelloBytes(absl::string_view identity) {
  return TcpHello(identity, std::string(kMaxSecretLength, 'x')).size();
}

absl::Status CheckTcpHello(absl::string_view hello, absl::string_view identity,
                           absl::string_view secret) {
  const std::vector<absl::string_view> parts =
      absl::StrSplit(hello, absl::MaxSplits('\n', 3));
  if (parts.size() != 4 || parts[0] != kTcpHelloMagic) {
    return absl::PermissionDeniedError(
        "a connection that is not a stage link's arrived");
  }
  // Checked first, so that nothing about the job is told to a peer
  // without the secret.
  if (!TokensEqual(parts[3], secret)) {
    return absl::PermissionDeniedError(
        "a connection without the job's stage link secret arrived");
  }
  if (parts[1] != identity) {
    return absl::PermissionDeniedError(
        absl::StrCat("a stage that is not the next one connected (it says '",
                     parts[1], "', this stage waits for '", identity, "')"));
  }
  if (parts[2] != ByteOrder()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the next stage's host lays out bytes as ", parts[2], ", this one as ",
        ByteOrder(),
        ": activations travel as raw floats, so both stages' hosts must "
        "store them alike"));
  }
  return absl::OkStatus();
}

}  // namespace ps::worker::pipeline
