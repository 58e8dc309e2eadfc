// What every `strata` subcommand shares: its one-line errors and the reading of its flags.
#include "cli/commands.h"

#include "core/log.h"

namespace strata::cli {

int fail(const std::string& message, int code) {
  log_error(message);
  return code;
}

int run_command(const std::vector<std::string>& args, const std::vector<FlagSpec>& specs,
                const std::string& command, const std::function<int(const ParsedArgs&)>& body) {
  auto parsed = parse_args(args, specs, command);
  if (!parsed.ok()) return fail(parsed.status().message(), 2);
  return body(*parsed);
}

}  // namespace strata::cli
