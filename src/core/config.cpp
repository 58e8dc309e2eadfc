#include "core/config.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/config_bounds.h"
#include "core/config_fields.h"
#include "core/file_util.h"
#include "core/format.h"
#include "core/json_util.h"

namespace strata {

using json = nlohmann::json;

namespace {

using config_fields::shortest_text;

// ---------------------------------------------------------------------------------------------
// Message helpers. Every error is one line, so user text is escaped before it goes into one.

// A JSON value as it would appear in the file; long values are cut so the line stays readable
// (a string by excerpt, Note [Bounded echoes]), and only what is shown is read (Note [Bounded
// JSON nesting]).
std::string show(const json& v) {
  if (v.is_string()) return "\"" + excerpt(v.get_ref<const std::string&>()) + "\"";
  return json_preview(v, kMaxShownValue);
}

// A string a config value holds. It must be UTF-8, since the config is written back out as JSON
// (in every checkpoint), and free of NUL, which would cut a path short.
Status check_text(const json& v, const std::string& key, const std::string& source) {
  const std::string& s = v.get_ref<const std::string&>();
  if (const int64_t bad = invalid_utf8_offset(s); bad >= 0) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(s[bad]));
    return invalid_argument(key + " is not UTF-8 text (byte " + byte + " at offset " +
                            std::to_string(bad) + ") in " + source);
  }
  if (const size_t nul = s.find('\0'); nul != std::string::npos) {
    return invalid_argument(key + " contains a NUL character (at offset " + std::to_string(nul) +
                            ") in " + source);
  }
  return Status::ok_status();
}

std::string join_key(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

const char* type_phrase(const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "true or false";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    default:
      return "null";
  }
}

Status type_error(const json& base, const json& v, const std::string& key,
                  const std::string& source) {
  return invalid_argument(key + " must be " + type_phrase(base) + ", got " + show(v) + " in " +
                          source);
}

// ---------------------------------------------------------------------------------------------
// Merging.

Status merge_object(json& base, const json& overlay, const std::string& prefix,
                    const std::string& source);

// Replaces base with v after checking that v has base's type. Integers are stored as int64 and
// floats as double whatever form the overlay used, so a later overlay is checked against the
// type the default declared, not against whatever an earlier overlay wrote.
Status merge_value(json& base, const json& v, const std::string& key, const std::string& source) {
  if (config_fields::number_or_auto(key)) {
    if (!(v.is_number() || v == "auto")) {
      return invalid_argument(key + " must be a number or \"auto\", got " + show(v) + " in " +
                              source);
    }
    base = v.is_number() ? json(v.get<double>()) : v;
    return Status::ok_status();
  }
  // A list key given one string (lora.targets=q_proj,v_proj on the command line, "targets":
  // "all-linear" in a file) takes its comma-separated parts.
  if (base.is_array() && v.is_string()) {
    STRATA_RETURN_IF_ERROR(check_text(v, key, source));
    json parts = json::array();
    const std::string text = v.get<std::string>();
    for (size_t at = 0;;) {
      const size_t comma = text.find(',', at);
      parts.push_back(text.substr(at, comma == std::string::npos ? comma : comma - at));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    base = std::move(parts);
    return Status::ok_status();
  }
  switch (base.type()) {
    case json::value_t::object:
      if (!v.is_object()) return type_error(base, v, key, source);
      return merge_object(base, v, key, source);
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: {
      if (v.is_number_unsigned()) {
        if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return invalid_argument(key + " must be an integer below 2^63, got " + show(v) + " in " +
                                  source);
        }
        base = v.get<int64_t>();
        return Status::ok_status();
      }
      if (v.is_number_integer()) {
        base = v.get<int64_t>();
        return Status::ok_status();
      }
      // 1e3 is a float in JSON but means the integer 1000; 2.5 has no integer meaning.
      if (v.is_number_float()) {
        double d = v.get<double>();
        if (std::isfinite(d) && d == std::trunc(d) && d >= -0x1p63 && d < 0x1p63) {
          base = static_cast<int64_t>(d);
          return Status::ok_status();
        }
      }
      return invalid_argument(key + " must be an integer, got " + show(v) + " in " + source);
    }
    case json::value_t::number_float:
      if (!v.is_number()) return type_error(base, v, key, source);
      base = v.get<double>();
      return Status::ok_status();
    default:
      if (v.type() != base.type()) return type_error(base, v, key, source);
      if (v.is_string()) STRATA_RETURN_IF_ERROR(check_text(v, key, source));
      if (v.is_array()) {  // io.dirs, a list of strings (Paths checks the element types)
        for (const json& e : v) {
          if (e.is_string()) STRATA_RETURN_IF_ERROR(check_text(e, key, source));
        }
      }
      base = v;
      return Status::ok_status();
  }
}

Status merge_object(json& base, const json& overlay, const std::string& prefix,
                    const std::string& source) {
  for (const auto& [k, v] : overlay.items()) {
    std::string key = join_key(prefix, excerpt(k));
    auto it = base.find(k);
    if (it == base.end()) {
      return invalid_argument("unknown key '" + key + "' in " + source);
    }
    STRATA_RETURN_IF_ERROR(merge_value(*it, v, key, source));
  }
  return Status::ok_status();
}

}  // namespace

json default_config_json() {
  return config_to_json(TrainConfig{});
}

Result<json> read_json_file(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, read_whole_file(path, "file"));
  // Comments are allowed: a config is often annotated by hand, and so is a key given twice by
  // mistake (Note [Duplicate keys]).
  return parse_json(text, excerpt(path, kMaxShownPath),
                    JsonSyntax{.comments = true, .unique_keys = true});
}

Status merge_config(json& base, const json& overlay, const std::string& source) {
  STRATA_CHECK(base.is_object());
  // The overlay may come from anywhere (a checkpoint's config.json parsed by its reader): its
  // depth is checked before anything copies it (Note [Bounded JSON nesting]).
  STRATA_RETURN_IF_ERROR(check_json_depth(overlay, source));
  if (!overlay.is_object()) {
    return invalid_argument(source + ": the top level must be a JSON object, got " + show(overlay));
  }
  return merge_object(base, overlay, "", source);
}

Status apply_set(json& base, const std::string& assignment) {
  // Named in every error; a long value is cut so the message stays one readable line.
  const std::string source = "--set " + excerpt(assignment);
  size_t eq = assignment.find('=');
  if (eq == std::string::npos) {
    return invalid_argument(source + ": expected key=value, e.g. train.steps=100");
  }
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);

  std::vector<std::string> path;
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    path.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& part : path) {
    if (part.empty()) {
      return invalid_argument(source + ": '" + excerpt(key) +
                              "' is not a dotted key like train.steps");
    }
  }

  // A string field takes the text as written: data.train=123 names the file "123". Only a
  // quoted JSON string is unquoted, so data.train="a b" also works.
  const json* target = &base;
  for (const auto& part : path) {
    if (!target->is_object() || !target->contains(part)) {
      target = nullptr;
      break;
    }
    target = &target->at(part);
  }
  const bool string_target =
      target != nullptr && target->is_string() && !config_fields::number_or_auto(key);
  if (!string_target) {
    // Nesting too deep is an error, not a string: the parser would accept it (Note [Bounded JSON
    // nesting]). A string field never parses as anything but a string, so it is not checked.
    Status nesting = check_json_text(text, source);
    if (!nesting.ok()) return invalid_argument(nesting.message());
  }
  json parsed = json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  json value;
  if (string_target) {
    value = parsed.is_string() ? parsed : json(text);
  } else {
    // Text that is not JSON stays a string, so train.steps=abc reports "got \"abc\"".
    value = parsed.is_discarded() ? json(text) : parsed;
  }

  json overlay = std::move(value);
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    json wrapped = json::object();
    wrapped[*it] = std::move(overlay);
    overlay = std::move(wrapped);
  }
  return merge_config(base, overlay, source);
}

namespace {

// ---------------------------------------------------------------------------------------------
// The rules between keys. parse_config checks each key's own rule first (the rows, in order),
// then these, then the bounds of Note [Config bounds]: of several faults, the first so found is
// named.

// A GPT-2 model leaves every Llama field at its default: the first one that differs, named.
Status check_gpt2_fields(const ModelConfig& m) {
  const ModelConfig d;
  auto differs = [](const char* field, const std::string& got) {
    return invalid_argument(std::string("model.") + field + " " + got +
                            " is a Llama setting: model.arch gpt2 needs its default");
  };
  if (m.n_kv_head != 0 && m.n_kv_head != m.n_head) {
    return differs("n_kv_head", std::to_string(m.n_kv_head));
  }
  if (m.ffn_hidden != 0 && m.ffn_hidden != 4 * m.n_embd) {
    return differs("ffn_hidden", std::to_string(m.ffn_hidden));
  }
  if (m.rope_scaling.type != RopeScalingKind::none) {
    return differs("rope_scaling.type", enum_name(m.rope_scaling.type));
  }
  if (m.norm_eps != d.norm_eps) return differs("norm_eps", shortest_text(m.norm_eps));
  if (!m.tie_embeddings) return differs("tie_embeddings", "false");
  return Status::ok_status();
}

Status check_rope_scaling(const RopeScaling& r) {
  if (r.type != RopeScalingKind::llama3) return Status::ok_status();
  if (!(r.factor >= 1) || !std::isfinite(r.factor)) {
    return invalid_argument("model.rope_scaling.factor must be >= 1, got " +
                            shortest_text(r.factor));
  }
  if (!(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor) ||
      !std::isfinite(r.high_freq_factor)) {
    return invalid_argument(
        "model.rope_scaling needs 0 < low_freq_factor < high_freq_factor, got " +
        shortest_text(r.low_freq_factor) + " and " + shortest_text(r.high_freq_factor));
  }
  if (r.original_context_length <= 0) {
    return invalid_argument("model.rope_scaling.original_context_length must be positive, got " +
                            std::to_string(r.original_context_length));
  }
  return Status::ok_status();
}

Status check_llama_fields(const ModelConfig& m) {
  if (m.n_head % m.kv_heads() != 0) {
    return invalid_argument("model.n_head " + std::to_string(m.n_head) +
                            " is not a multiple of model.n_kv_head " +
                            std::to_string(m.kv_heads()));
  }
  if (m.head_size() % 2 != 0) {
    return invalid_argument("model.n_embd / model.n_head = " + std::to_string(m.head_size()) +
                            " is odd: rotary embeddings rotate pairs");
  }
  if (!(m.rope_theta > 0) || !std::isfinite(m.rope_theta)) {
    return invalid_argument("model.rope_theta must be positive, got " +
                            shortest_text(m.rope_theta));
  }
  if (!(m.norm_eps > 0 && m.norm_eps < 1)) {
    return invalid_argument("model.norm_eps must be in (0, 1), got " + shortest_text(m.norm_eps));
  }
  return check_rope_scaling(m.rope_scaling);
}

Status check_model(const ModelConfig& m) {
  if (m.n_embd % m.n_head != 0) {
    return invalid_argument("model.n_embd " + std::to_string(m.n_embd) +
                            " is not divisible by model.n_head " + std::to_string(m.n_head));
  }
  return m.arch == ModelArch::gpt2 ? check_gpt2_fields(m) : check_llama_fields(m);
}

Status check_run(const TrainConfig& c) {
  if (c.seq_len > c.model.context_length) {
    return invalid_argument("train.seq_len " + std::to_string(c.seq_len) +
                            " exceeds model.context_length " +
                            std::to_string(c.model.context_length));
  }
  STRATA_RETURN_IF_ERROR(check_matmul_needs_bf16_weights(c));
  if (c.eval_every > 0 && c.data_val.empty()) {
    return invalid_argument("train.eval_every " + std::to_string(c.eval_every) +
                            " needs data.val (\"embedded\" or a token file path)");
  }
  return Status::ok_status();
}

// offload.* and activations.*: where state goes, against the schedule and the storage
// directories.
Status check_placement(const TrainConfig& c) {
  const OffloadConfig& off = c.offload;
  // The in-memory schedule ignores the placement; the offloaded ones put every fraction below 1
  // on storage, which has nowhere to go without a directory.
  bool on_storage = off.params_on_host < 1 || off.optim_on_host < 1 ||
                    off.checkpoints_on_host < 1 || off.grads_on_host < 1 ||
                    !off.embed_optim_on_host;
  if (is_offloaded(c.schedule) && on_storage && c.io.dirs.empty()) {
    return invalid_argument(
        "io.dirs is empty but the offload placement puts state on storage (set io.dirs, or "
        "offload.*_on_host = 1)");
  }
  const ActivationConfig& a = c.activations;
  if (a.policy != ActsMode::recompute && c.schedule != Schedule::vertical) {
    return invalid_argument(std::string("activations.policy '") + enum_name(a.policy) +
                            "' needs train.schedule vertical (the other schedules recompute)");
  }
  const bool acts_offloaded = a.policy == ActsMode::offload || a.policy == ActsMode::automatic;
  if (acts_offloaded && a.tier == ActsTier::storage && c.io.dirs.empty()) {
    return invalid_argument(
        "io.dirs is empty but activations.tier is storage (set io.dirs, or "
        "activations.tier = host)");
  }
  return Status::ok_status();
}

void first_difference(const json& a, const json& b, const std::string& prefix,
                      std::optional<FieldDifference>& out) {
  for (const auto& [k, va] : a.items()) {
    if (out) return;
    const std::string key = prefix + "." + k;
    const json& vb = b.at(k);
    if (va.is_object()) {
      first_difference(va, vb, key, out);
    } else if (va != vb) {
      out = FieldDifference{key, va.dump(), vb.dump()};
    }
  }
}

}  // namespace

Status check_matmul_needs_bf16_weights(const TrainConfig& c) {
  if (c.matmul != MatmulPrecision::bf16 || c.precision == Precision::bf16) {
    return Status::ok_status();
  }
  return invalid_argument(
      "train.matmul is bf16 but train.precision is " + std::string(enum_name(c.precision)) +
      ": bf16 GEMMs read the bf16 working weights, so set train.precision to bf16 too");
}

Result<TrainConfig> parse_config(const json& j) {
  json full = default_config_json();
  STRATA_RETURN_IF_ERROR(merge_config(full, j, "config"));
  TrainConfig c;
  STRATA_RETURN_IF_ERROR(config_fields::read_fields(full, c));
  STRATA_RETURN_IF_ERROR(check_model(c.model));
  STRATA_RETURN_IF_ERROR(check_run(c));
  STRATA_RETURN_IF_ERROR(check_placement(c));
  STRATA_RETURN_IF_ERROR(check_config_bounds(c));
  return c;
}

json config_to_json(const TrainConfig& c) {
  return config_fields::fields_json(c);
}

std::optional<FieldDifference> model_difference(const ModelConfig& a, const ModelConfig& b) {
  TrainConfig ca, cb;
  ca.model = a;
  cb.model = b;
  std::optional<FieldDifference> out;
  first_difference(config_to_json(ca).at("model"), config_to_json(cb).at("model"), "model", out);
  return out;
}

}  // namespace strata
