// Fuzzes the look a server takes at a Register before parsing it
// (PreviewRegister), against protobuf's own parse of the same bytes: what
// protobuf parses as a RegisterRequest, the preview must read too, with the
// same header (repeated header fields merged, as protobuf merges them) and
// the same number of declared tensors, so that the checks made on the
// preview are the checks the parsed request would have faced. The preview
// must never crash, whatever the bytes.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_input.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "proto/parameter_server.pb.h"
#include "server/register_precheck.h"

namespace ps::fuzz {
namespace {

// The message's bytes in field order, so that equal messages compare equal.
std::string Canonical(const proto::RequestHeader& header) {
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  google::protobuf::io::CodedOutputStream out(&stream);
  out.SetSerializationDeterministic(true);
  header.SerializeToCodedStream(&out);
  out.Trim();
  return bytes;
}

int Run(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<server::RegisterPreview> preview =
      server::PreviewRegister(bytes);
  proto::RegisterRequest parsed;
  if (!parsed.ParseFromArray(data, static_cast<int>(size))) return 0;
  FUZZ_CHECK(preview.ok(),
             absl::StrCat("a RegisterRequest protobuf parses is refused: ",
                          preview.status().ToString()));
  FUZZ_CHECK(preview->tensors ==
                 static_cast<uint64_t>(parsed.declaration().tensors_size()),
             absl::StrCat("the preview counts ", preview->tensors,
                          " tensors, the parse ",
                          parsed.declaration().tensors_size()));
  FUZZ_CHECK(Canonical(preview->header) == Canonical(parsed.header()),
             "the preview reads another header than the parse");
  return 0;
}

}  // namespace
}  // namespace ps::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  ps::fuzz::SilenceProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ps::fuzz::Run(data, size);
}
