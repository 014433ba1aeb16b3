#include "common/peer_text.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace ps {

std::string PeerText(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return absl::CHexEscape(text);
  return absl::StrCat(absl::CHexEscape(text.substr(0, max_bytes)), "... (",
                      text.size(), " bytes)");
}

}  // namespace ps
