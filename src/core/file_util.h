// Small whole-file helpers shared by the config reader, the tokenizer and the commands.
#pragma once

#include <string>

#include "core/status.h"

namespace strata {

// The whole file as bytes. `what` names it in errors: "config file", "text file".
// Errors: not_found when it does not exist, io_error otherwise (with strerror).
Result<std::string> read_whole_file(const std::string& path, const std::string& what);

// Writes `text` as the whole file (created or truncated). io_error "cannot write <what> <path>"
// when it cannot be opened or written.
Status write_whole_file(const std::string& path, const std::string& text, const std::string& what);

}  // namespace strata
