#ifndef PS_SERVER_SERVER_FLAGS_H_
#define PS_SERVER_SERVER_FLAGS_H_

// The server binary's command-line flags (--server_index, --mode, ...; see
// `server --help`), defined with ServerFlags' defaults. Linked into the
// `server` binary only: a process has one set of flags.
#include "server/server_config.h"

namespace ps::server {

// The flags' values, as absl::ParseCommandLine left them. Reads absl's flag
// registry: call from main, after parsing.
ServerFlags ServerFlagValues();

// Makes --help, --helpshort and --helppackage list these flags: absl lists
// by default those of the file holding main only. Before
// absl::ParseCommandLine.
void ListServerFlagsInHelp();

}  // namespace ps::server

#endif  // PS_SERVER_SERVER_FLAGS_H_
