// The config parser: a config file's text (read_json_file's parse: comments allowed, a key twice
// refused), merged over the default and validated; parse_config of the raw value (which merges
// itself); and every line of the input as a --set assignment. A config that parses must survive
// config_to_json and parse_config unchanged (config.h's round-trip promise).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/config.h"
#include "core/json_util.h"

namespace {

using strata::TrainConfig;

// parse_config(config_to_json(c)) must give c back: compared as JSON, which holds every field.
void check_round_trip(const TrainConfig& c) {
  const nlohmann::json j = strata::config_to_json(c);
  auto again = strata::parse_config(j);
  if (!again.ok() || strata::config_to_json(*again) != j) {
    std::fprintf(stderr, "config round trip failed: %s\n",
                 again.ok() ? "values differ" : again.status().message().c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto j = strata::parse_json(text, "fuzz config",
                              strata::JsonSyntax{.comments = true, .unique_keys = true});
  if (j.ok()) {
    // Note [Duplicate keys]: the check refuses, never changes, what the parser makes.
    auto plain = strata::parse_json(text, "fuzz config", strata::JsonSyntax{.comments = true});
    if (!plain.ok() || *plain != *j) {
      std::fprintf(stderr, "unique_keys changed the parse\n");
      std::abort();
    }
    nlohmann::json base = strata::default_config_json();
    if (strata::merge_config(base, *j, "fuzz config").ok()) {
      auto c = strata::parse_config(base);
      if (c.ok()) check_round_trip(*c);
    }
    auto direct = strata::parse_config(*j);
    if (direct.ok()) check_round_trip(*direct);
  }

  // Each line a --set key=value, applied in turn.
  nlohmann::json base = strata::default_config_json();
  bool all_ok = true;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    if (end > at)
      all_ok = strata::apply_set(base, std::string(text.substr(at, end - at))).ok() && all_ok;
    at = end + 1;
  }
  if (all_ok) {
    auto c = strata::parse_config(base);
    if (c.ok()) check_round_trip(*c);
  }
  return 0;
}
