// A small command-line reader: "--flag value", "--flag=value" and repeated flags, with one-line
// errors that name the flag.
#pragma once

#include <cstdint>
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

// The embedded default, then --config FILE (or, without it, --resume's checkpoint's config.json:
// a resumed run is the checkpoint's unless a --set says otherwise), then each --set key=value in
// order, then --device (for the commands that take it).
Result<TrainConfig> load_config_from_args(const ParsedArgs& a);
// load_config_from_args, then --model PRESET's shape and the sequence length it is trained at
// (planner/planner.h's presets), for the commands that take it.
Result<TrainConfig> load_config_and_preset(const ParsedArgs& a);

// A positive (or, with allow_zero, non-negative) integer flag; invalid_argument naming it.
Result<int64_t> int_flag(const ParsedArgs& a, const std::string& flag, bool allow_zero);
// A size flag's value in bytes: "4096", "64K", "2G", "2GiB" (K, M, G, KiB, MiB, GiB: powers of
// 1024) or "5GB" (KB, MB, GB: powers of 1000, as Hugging Face's max_shard_size). invalid_argument
// naming --flag otherwise.
Result<uint64_t> parse_byte_size(const std::string& flag, const std::string& text);

Result<ParsedArgs> parse_args(const std::vector<std::string>& args,
                              const std::vector<FlagSpec>& specs, const std::string& command);

}  // namespace strata::cli
