// A small command-line reader: "--flag value", "--flag=value" and repeated flags, with one-line
// errors that name the flag.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace strata::cli {

struct FlagSpec {
  std::string name;  // without the dashes: "config"
  bool takes_value;  // --config FILE vs --quiet
  bool repeatable;   // --set may appear many times
};

struct ParsedArgs {
  std::map<std::string, std::vector<std::string>> values;  // flag -> values in order
  bool has(const std::string& flag) const { return values.count(flag) != 0; }
  std::string get(const std::string& flag, const std::string& fallback = "") const;
  const std::vector<std::string>& all(const std::string& flag) const;
};

// The embedded default, then --config FILE, then each --set key=value in order, then --device
// (for the commands that take it).
Result<TrainConfig> load_config_from_args(const ParsedArgs& a);

Result<ParsedArgs> parse_args(const std::vector<std::string>& args,
                              const std::vector<FlagSpec>& specs, const std::string& command);

}  // namespace strata::cli
