#include "cli/args.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "formats/checkpoint.h"
#include "planner/planner.h"

namespace strata::cli {

std::string ParsedArgs::get(const std::string& flag, const std::string& fallback) const {
  auto it = values.find(flag);
  return it == values.end() || it->second.empty() ? fallback : it->second.back();
}

const std::vector<std::string>& ParsedArgs::all(const std::string& flag) const {
  static const std::vector<std::string> none;
  auto it = values.find(flag);
  return it == values.end() ? none : it->second;
}

Result<int64_t> int_flag(const ParsedArgs& a, const std::string& flag, bool allow_zero) {
  const std::string text = a.get(flag);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < (allow_zero ? 0 : 1)) {
    return invalid_argument("--" + flag + " must be " +
                            (allow_zero ? "a non-negative" : "a positive") + " integer, got '" +
                            text + "'");
  }
  return static_cast<int64_t>(v);
}

Result<uint64_t> parse_byte_size(const std::string& flag, const std::string& text) {
  if (text.empty()) return invalid_argument("--" + flag + " is empty");
  size_t used = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(text, &used);
  } catch (...) {
    return invalid_argument("--" + flag + " '" + text +
                            "' is not a size (e.g. 4096, 64K, 1M, 2G, 5GB)");
  }
  if (text[0] == '-') return invalid_argument("--" + flag + " '" + text + "' is negative");
  static const std::pair<const char*, uint64_t> units[] = {{"", 1},
                                                           {"k", 1ull << 10},
                                                           {"K", 1ull << 10},
                                                           {"KiB", 1ull << 10},
                                                           {"m", 1ull << 20},
                                                           {"M", 1ull << 20},
                                                           {"MiB", 1ull << 20},
                                                           {"g", 1ull << 30},
                                                           {"G", 1ull << 30},
                                                           {"GiB", 1ull << 30},
                                                           {"KB", 1000},
                                                           {"MB", 1000 * 1000},
                                                           {"GB", 1000ull * 1000 * 1000}};
  const std::string suffix = text.substr(used);
  for (const auto& [unit, mult] : units) {
    if (suffix != unit) continue;
    if (n > UINT64_MAX / mult)
      return invalid_argument("--" + flag + " '" + text + "' is too large");
    return static_cast<uint64_t>(n) * mult;
  }
  return invalid_argument("--" + flag + " '" + text +
                          "' has an unknown unit (K, M, G, KiB, MiB, GiB: powers of 1024; KB, "
                          "MB, GB: powers of 1000)");
}

Result<TrainConfig> load_config_from_args(const ParsedArgs& a) {
  nlohmann::json j = default_config_json();
  std::string layer = a.get("config");
  if (layer.empty() && a.has("resume")) {  // the run continued is the checkpoint's
    STRATA_ASSIGN_OR_RETURN(const std::string dir, resolve_checkpoint(a.get("resume")));
    layer = dir + "/config.json";
  }
  if (!layer.empty()) {
    STRATA_ASSIGN_OR_RETURN(nlohmann::json file, read_json_file(layer));
    STRATA_RETURN_IF_ERROR(merge_config(j, file, layer));
  }
  for (const std::string& assignment : a.all("set")) {
    STRATA_RETURN_IF_ERROR(apply_set(j, assignment));
  }
  STRATA_ASSIGN_OR_RETURN(TrainConfig cfg, parse_config(j));
  if (a.has("device")) {  // --device overrides the config's device
    STRATA_ASSIGN_OR_RETURN(cfg.device, parse_enum<DeviceKind>("--device", a.get("device")));
  }
  return cfg;
}

Result<TrainConfig> load_config_and_preset(const ParsedArgs& a) {
  STRATA_ASSIGN_OR_RETURN(TrainConfig cfg, load_config_from_args(a));
  if (a.has("model")) {
    STRATA_ASSIGN_OR_RETURN(ModelPreset p, find_preset(a.get("model")));
    cfg.model = p.model;
    cfg.seq_len = p.seq_len;
  }
  return cfg;
}

Result<ParsedArgs> parse_args(const std::vector<std::string>& args,
                              const std::vector<FlagSpec>& specs, const std::string& command) {
  ParsedArgs out;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      return invalid_argument("strata " + command + ": unexpected argument '" + a + "'");
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = nullptr;
    for (const auto& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) {
      return invalid_argument("strata " + command + ": unknown flag --" + name + " (see strata " +
                              command + " --help)");
    }
    if (spec->takes_value && !inline_value) {
      if (i + 1 >= args.size()) {
        return invalid_argument("strata " + command + ": --" + name + " needs a value");
      }
      value = args[++i];
    } else if (!spec->takes_value && inline_value) {
      return invalid_argument("strata " + command + ": --" + name + " takes no value");
    }
    if (!spec->repeatable && out.has(name)) {
      return invalid_argument("strata " + command + ": --" + name + " given twice");
    }
    out.values[name].push_back(value);
  }
  return out;
}

}  // namespace strata::cli
