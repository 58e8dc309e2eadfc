// The rules of the config's field table, the walk over its rows, and what config.cpp and
// config_bounds.cpp do with them (Note [The config's field table] in core/config.h).
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/check.h"
#include "core/config.h"
#include "core/config_bounds.h"
#include "core/status.h"

namespace strata::config_fields {

inline constexpr float kInf = std::numeric_limits<float>::infinity();

// No rule of the key's own: any value of its type (an enum: one of its names), checked, if at
// all, by the rules between keys.
struct Any {};

// An integer. parse_config refuses one below min ("must be positive" for 1, "must be >= min"
// otherwise) or, with a unit, one that is not a positive multiple of it; check_config_bounds
// refuses one outside [min, max] where max is given (Note [Config bounds]).
// (Constructors, not aggregates: clang 14 has no parenthesised aggregate initialisation.)
struct Ints {
  constexpr Ints(int64_t min_value = std::numeric_limits<int64_t>::min(),
                 int64_t max_value = std::numeric_limits<int64_t>::max(), int64_t unit_value = 1)
      : min(min_value), max(max_value), unit(unit_value) {}
  int64_t min;
  int64_t max;
  int64_t unit;
};

// A float, finite as a float and within an interval whose ends are '[' or '(' and ']' or ')'.
struct Interval {
  constexpr Interval(char open_end, float low, float high, char close_end)
      : open(open_end), lo(low), hi(high), close(close_end) {}
  char open;
  float lo, hi;
  char close;
};

// A double in [0, 1]; an optional<double> is that or "auto" (nullopt).
struct Fraction {};

// A string; given must_be, an empty one is refused as "<key> must be <must_be>, got \"\"".
struct Text {
  constexpr explicit Text(const char* must_be_what = nullptr) : must_be(must_be_what) {}
  const char* must_be;
};

// A list of non-empty paths, at most max_count of them (Note [Config bounds]).
struct Paths {
  constexpr explicit Paths(int64_t max) : max_count(max) {}
  int64_t max_count;
};

// A list of non-empty names (module names), at most max_count of them.
struct Names {
  constexpr explicit Names(int64_t max) : max_count(max) {}
  int64_t max_count;
};

// A row's key: its list's section and its member's name, less a "<section>_" prefix (the data_
// members of TrainConfig), so data_train is "data.train" and device (no section) "device".
inline std::string field_key(std::string_view section, std::string_view member) {
  if (section.empty()) return std::string(member);
  const std::string prefix = std::string(section) + "_";
  if (member.substr(0, prefix.size()) == prefix) member.remove_prefix(prefix.size());
  return std::string(section) + "." + std::string(member);
}

// One row of a list, inside STRATA_VISIT_FIELDS_OF's block: `at` is the struct holding the
// list's members and `section` their keys' section.
#define STRATA_VISIT_FIELD(Type, member, default_value, rule, doc) \
  STRATA_RETURN_IF_ERROR(visit(field_key(section, #member), rule, doc, at.member));
#define STRATA_VISIT_FIELDS_OF(list, where, section_name) \
  {                                                       \
    auto& at = where;                                     \
    const std::string_view section = section_name;        \
    list(STRATA_VISIT_FIELD)                              \
  }

// Calls visit(key, rule, doc, field) on every row, key a std::string, list by list in this
// order, and returns the first error a call returns. C is TrainConfig or const TrainConfig.
template <typename C, typename Visit>
Status for_each_field(C& c, Visit&& visit) {
  STRATA_VISIT_FIELDS_OF(STRATA_MODEL_FIELDS, c.model, "model")
  STRATA_VISIT_FIELDS_OF(STRATA_ROPE_SCALING_FIELDS, c.model.rope_scaling, "model.rope_scaling")
  STRATA_VISIT_FIELDS_OF(STRATA_TRAIN_FIELDS, c, "train")
  STRATA_VISIT_FIELDS_OF(STRATA_TOP_FIELDS, c, "")
  STRATA_VISIT_FIELDS_OF(STRATA_OPTIM_FIELDS, c.optim, "optim")
  STRATA_VISIT_FIELDS_OF(STRATA_DATA_FIELDS, c, "data")
  STRATA_VISIT_FIELDS_OF(STRATA_IO_FIELDS, c.io, "io")
  STRATA_VISIT_FIELDS_OF(STRATA_MEMORY_FIELDS, c.memory, "memory")
  STRATA_VISIT_FIELDS_OF(STRATA_OFFLOAD_FIELDS, c.offload, "offload")
  STRATA_VISIT_FIELDS_OF(STRATA_ACTIVATION_FIELDS, c.activations, "activations")
  STRATA_VISIT_FIELDS_OF(STRATA_LORA_FIELDS, c.lora, "lora")
  return Status::ok_status();
}

#undef STRATA_VISIT_FIELDS_OF
#undef STRATA_VISIT_FIELD

// Every row from `merged` (the default with the user's JSON merged over it, so every key is
// there with the default's type) into c, each checked against its rule: the first that is not,
// named.
Status read_fields(const nlohmann::json& merged, TrainConfig& c);

// The JSON pointer of a dotted key ("model.rope_scaling.type").
nlohmann::json::json_pointer key_pointer(const std::string& key);

// Every row as config_to_json writes it; floats as their shortest decimal.
nlohmann::json fields_json(const TrainConfig& c);

// Whether a key takes a number or the word "auto": the optional<double> rows (optim.alpha), the
// only keys whose JSON type is not the default's.
bool number_or_auto(const std::string& key);

// The shortest decimal that reads back as the same float or double, so 3e-3f prints as 0.003,
// not 0.0030000000260770321.
template <typename F>
std::string shortest_text(F f) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  STRATA_CHECK(r.ec == std::errc());
  return std::string(buf, r.ptr);
}

}  // namespace strata::config_fields
