// The config's field table, read and written (Note [The config's field table] in core/config.h).
#include "core/config_fields.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <type_traits>

#include "core/check.h"
#include "core/format.h"
#include "core/json_util.h"

namespace strata::config_fields {

using json = nlohmann::json;

// The JSON pointer of a dotted key ("model.rope_scaling.type").
json::json_pointer key_pointer(const std::string& key) {
  std::string p = "/" + key;
  std::replace(p.begin(), p.end(), '.', '/');
  return json::json_pointer(p);
}

namespace {

// The double nearest to shortest_text(f). Parsing it back as double then rounding to float gives f
// again: double has more than 2*24+2 bits, so the second rounding cannot change the result.
json float_json(float f) {
  std::string s = shortest_text(f);
  double d = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), d);
  STRATA_CHECK(r.ec == std::errc());
  return json(d);
}

// A row's value from the merged JSON, refused against the row's rule. After the merge every key
// holds a value of the default's type, so the reads cannot throw.
Status read_field(const json& v, const std::string& key, Ints rule, int64_t& out) {
  out = v.get<int64_t>();
  if (rule.unit > 1 && (out <= 0 || out % rule.unit != 0)) {
    return invalid_argument(key + " must be a positive multiple of " + std::to_string(rule.unit) +
                            ", got " + std::to_string(out));
  }
  if (out >= rule.min) return Status::ok_status();
  return invalid_argument(key + " must be " +
                          (rule.min == 1 ? "positive" : ">= " + std::to_string(rule.min)) +
                          ", got " + std::to_string(out));
}

// Values beyond float's range (1e300) would silently become inf.
Status read_field(const json& v, const std::string& key, Interval rule, float& out) {
  const double d = v.get<double>();
  out = static_cast<float>(d);
  if (!std::isfinite(out)) {
    return invalid_argument(key + " " + json_preview(json(d)) + " is out of range for a float");
  }
  const bool ok = (rule.open == '(' ? out > rule.lo : out >= rule.lo) &&
                  (rule.close == ')' ? out < rule.hi : out <= rule.hi);
  if (ok) return Status::ok_status();
  const std::string interval = rule.open + shortest_text(rule.lo) + ", " +
                               (std::isinf(rule.hi) ? "inf" : shortest_text(rule.hi)) + rule.close;
  return invalid_argument(key + " must be in " + interval + ", got " + shortest_text(out));
}

// Kept as double, not float: the value is used as given, and config_to_json writes it back exactly.
Status read_field(const json& v, const std::string& key, Fraction, double& out) {
  out = v.get<double>();
  if (out >= 0 && out <= 1) return Status::ok_status();  // also refuses NaN
  return invalid_argument(key + " must be in [0, 1], got " + shortest_text(out));
}

Status read_field(const json& v, const std::string& key, Fraction rule,
                  std::optional<double>& out) {
  out.reset();
  if (v == "auto") return Status::ok_status();
  double d = 1;
  STRATA_RETURN_IF_ERROR(read_field(v, key, rule, d));
  out = d;
  return Status::ok_status();
}

Status read_field(const json& v, const std::string& key, Text rule, std::string& out) {
  out = v.get<std::string>();
  if (rule.must_be == nullptr || !out.empty()) return Status::ok_status();
  return invalid_argument(key + " must be " + rule.must_be + ", got \"\"");
}

Status read_field(const json& v, const std::string& key, Paths, std::vector<std::string>& out) {
  out.clear();
  for (const json& path : v) {
    if (!path.is_string() || path.get<std::string>().empty()) {
      return invalid_argument(key + " must list directory paths, got " + json_preview(path));
    }
    out.push_back(path.get<std::string>());
  }
  return Status::ok_status();
}

Status read_field(const json& v, const std::string& key, Names, std::vector<std::string>& out) {
  out.clear();
  for (const json& name : v) {
    if (!name.is_string() || name.get<std::string>().empty()) {
      return invalid_argument(key + " must list module names, got " + json_preview(name));
    }
    out.push_back(name.get<std::string>());
  }
  return Status::ok_status();
}

// The rows without a rule of their own: bools, doubles, and enums by their names.
template <typename T>
Status read_field(const json& v, const std::string& key, Any, T& out) {
  if constexpr (std::is_enum_v<T>) {
    STRATA_ASSIGN_OR_RETURN(out, parse_enum<T>(key, v.get<std::string>()));
  } else {
    out = v.get<T>();
  }
  return Status::ok_status();
}

// A field as config_to_json writes it.
template <typename T>
json field_json(const T& v) {
  if constexpr (std::is_enum_v<T>) {
    return enum_name(v);
  } else if constexpr (std::is_same_v<T, float>) {
    return float_json(v);
  } else if constexpr (std::is_same_v<T, std::optional<double>>) {
    return v ? json(*v) : json("auto");
  } else {
    return v;  // doubles stay JSON floats when integral (0.0, 1.0), so merge_value types them
  }
}

}  // namespace

bool number_or_auto(const std::string& key) {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    const TrainConfig c;
    (void)for_each_field(c, [&](const std::string& k, const auto&, const char*, const auto& v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::optional<double>>) {
        out.push_back(k);
      }
      return Status::ok_status();
    });
    return out;
  }();
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

Status read_fields(const json& merged, TrainConfig& c) {
  return for_each_field(c, [&](const std::string& key, const auto& rule, const char*, auto& field) {
    return read_field(merged.at(key_pointer(key)), key, rule, field);
  });
}

json fields_json(const TrainConfig& c) {
  json j = json::object();
  (void)for_each_field(c, [&](const std::string& key, const auto&, const char*, const auto& field) {
    j[key_pointer(key)] = field_json(field);
    return Status::ok_status();
  });
  return j;
}

}  // namespace strata::config_fields

namespace strata {

namespace {

// A value in a message, bounded (Note [Bounded echoes]).
std::string shown(const nlohmann::json& v) {
  if (v.is_string()) return "\"" + excerpt(v.get_ref<const std::string&>()) + "\"";
  return json_preview(v, kMaxShownValue);
}

}  // namespace

std::vector<FieldDifference> config_differences(const TrainConfig& a, const TrainConfig& b) {
  const nlohmann::json ja = config_to_json(a), jb = config_to_json(b);
  std::vector<FieldDifference> out;
  (void)config_fields::for_each_field(
      a, [&](const std::string& key, const auto&, const char*, const auto&) {
        const auto at = config_fields::key_pointer(key);
        if (ja.at(at) != jb.at(at)) out.push_back({key, shown(ja.at(at)), shown(jb.at(at))});
        return Status::ok_status();
      });
  return out;
}

std::vector<FieldDifference> data_stream_changes(const TrainConfig& a, const TrainConfig& b) {
  const std::vector<FieldDifference> all = config_differences(a, b);
  std::vector<FieldDifference> out;
  for (std::string_view key : kDataStreamKeys) {
    if (key == "train.grad_accum") {  // the step's micro-batches, over all ranks
      if (a.grad_accum * a.ranks == b.grad_accum * b.ranks) continue;
      auto per_step = [&](const TrainConfig& c) {
        return std::to_string(c.grad_accum) +
               (a.ranks == b.ranks ? "" : " x " + std::to_string(c.ranks) + " ranks");
      };
      out.push_back({std::string(key), per_step(a), per_step(b)});
      continue;
    }
    if (key == "train.seed" && !a.data_shuffle && !b.data_shuffle) continue;  // not the order
    for (const FieldDifference& d : all) {
      if (d.key == key) out.push_back(d);
    }
  }
  return out;
}

bool is_config_key(std::string_view key) {
  bool found = false;
  const TrainConfig c;
  (void)config_fields::for_each_field(
      c, [&](const std::string& k, const auto&, const char*, const auto&) {
        found = found || k == key;
        return Status::ok_status();
      });
  return found;
}

}  // namespace strata
