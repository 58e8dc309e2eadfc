#include "core/config.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/config_bounds.h"
#include "core/file_util.h"
#include "core/format.h"
#include "core/json_util.h"

namespace strata {

using json = nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------
// Message helpers. Every error is one line, so user text is escaped before it goes into one.

// A JSON value as it would appear in the file; long values are cut so the line stays readable,
// and only what is shown is read (Note [Bounded JSON nesting]).
std::string show(const json& v) {
  return json_preview(v);
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

// Shortest decimal that reads back as the same float, so 3e-3f prints as 0.003, not
// 0.0030000000260770321.
std::string float_text(float f) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  STRATA_CHECK(r.ec == std::errc());
  return std::string(buf, r.ptr);
}

// Shortest decimal that reads back as the same double, for the fields kept as double.
std::string double_text(double d) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  STRATA_CHECK(r.ec == std::errc());
  return std::string(buf, r.ptr);
}

// The double nearest to float_text(f). Parsing it back as double then rounding to float gives f
// again: double has more than 2*24+2 bits, so the second rounding cannot change the result.
json float_json(float f) {
  std::string s = float_text(f);
  double d = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), d);
  STRATA_CHECK(r.ec == std::errc());
  return json(d);
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

// Keys that take a number or the word "auto" (the default): optim.alpha. The only keys whose
// type is not the default's (parse_optim reads it).
bool number_or_auto(const std::string& key) {
  return key == "optim.alpha";
}

// Replaces base with v after checking that v has base's type. Integers are stored as int64 and
// floats as double whatever form the overlay used, so a later overlay is checked against the
// type the default declared, not against whatever an earlier overlay wrote.
Status merge_value(json& base, const json& v, const std::string& key, const std::string& source) {
  if (number_or_auto(key)) {
    if (!(v.is_number() || v == "auto")) {
      return invalid_argument(key + " must be a number or \"auto\", got " + show(v) + " in " +
                              source);
    }
    base = v.is_number() ? json(v.get<double>()) : v;
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
      if (v.is_array()) {  // io.dirs, a list of strings (parse_io checks the element types)
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
    std::string key = join_key(prefix, printable(k));
    auto it = base.find(k);
    if (it == base.end()) {
      return invalid_argument("unknown key '" + key + "' in " + source);
    }
    STRATA_RETURN_IF_ERROR(merge_value(*it, v, key, source));
  }
  return Status::ok_status();
}

// ---------------------------------------------------------------------------------------------
// Validation helpers for parse_config.

Status check_positive(const char* key, int64_t v) {
  if (v > 0) return Status::ok_status();
  return invalid_argument(std::string(key) + " must be positive, got " + std::to_string(v));
}

Status check_non_negative(const char* key, int64_t v) {
  if (v >= 0) return Status::ok_status();
  return invalid_argument(std::string(key) + " must be >= 0, got " + std::to_string(v));
}

// Reads a float field; values beyond float's range (1e300) would silently become inf.
Status read_float(const json& j, const char* section, const char* name, float* out) {
  double d = j.at(section).at(name).get<double>();
  float f = static_cast<float>(d);
  if (!std::isfinite(f)) {
    return invalid_argument(std::string(section) + "." + name + " " + show(json(d)) +
                            " is out of range for a float");
  }
  *out = f;
  return Status::ok_status();
}

// lo <= v (or lo < v) and v <= hi (or v < hi), reported with interval notation.
Status check_range(const char* key, float v, float lo, bool lo_open, float hi, bool hi_open) {
  bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (ok) return Status::ok_status();
  std::string interval = std::string(lo_open ? "(" : "[") + float_text(lo) + ", " +
                         (std::isinf(hi) ? "inf" : float_text(hi)) + (hi_open ? ")" : "]");
  return invalid_argument(std::string(key) + " must be in " + interval + ", got " + float_text(v));
}

// Reads a double field that is a fraction, in [0, 1]. Kept as double, not float: the value is
// used as given, and config_to_json writes it back exactly.
Status read_fraction(const json& j, const char* section, const char* name, double* out) {
  double d = j.at(section).at(name).get<double>();
  if (!(d >= 0 && d <= 1)) {  // also refuses NaN
    return invalid_argument(std::string(section) + "." + name + " must be in [0, 1], got " +
                            double_text(d));
  }
  *out = d;
  return Status::ok_status();
}

}  // namespace

json default_config_json() {
  return config_to_json(TrainConfig{});
}

Result<json> read_json_file(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, read_whole_file(path, "file"));
  // Comments are allowed: a config is often annotated by hand.
  return parse_json(text, printable(path), JsonSyntax{.comments = true});
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
  constexpr size_t kMaxShown = 80;
  std::string source = "--set " + printable(assignment.substr(0, kMaxShown));
  if (assignment.size() > kMaxShown) source += "...";
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
      return invalid_argument(source + ": '" + printable(key) +
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
  const bool string_target = target != nullptr && target->is_string() && !number_or_auto(key);
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

// An enum-valued key of `section`, parsed by its config name (core/config_enums.h).
template <typename E>
Status read_enum(const json& full, const char* section, const char* key, E* out) {
  const json& sec = *section != 0 ? full.at(section) : full;
  const std::string field = *section != 0 ? std::string(section) + "." + key : std::string(key);
  STRATA_ASSIGN_OR_RETURN(*out, parse_enum<E>(field, sec.at(key).get<std::string>()));
  return Status::ok_status();
}

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
  if (m.norm_eps != d.norm_eps) return differs("norm_eps", double_text(m.norm_eps));
  if (!m.tie_embeddings) return differs("tie_embeddings", "false");
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
    return invalid_argument("model.rope_theta must be positive, got " + double_text(m.rope_theta));
  }
  if (!(m.norm_eps > 0 && m.norm_eps < 1)) {
    return invalid_argument("model.norm_eps must be in (0, 1), got " + double_text(m.norm_eps));
  }
  const RopeScaling& r = m.rope_scaling;
  if (r.type == RopeScalingKind::llama3) {
    if (!(r.factor >= 1) || !std::isfinite(r.factor)) {
      return invalid_argument("model.rope_scaling.factor must be >= 1, got " +
                              double_text(r.factor));
    }
    if (!(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor) ||
        !std::isfinite(r.high_freq_factor)) {
      return invalid_argument(
          "model.rope_scaling needs 0 < low_freq_factor < high_freq_factor, "
          "got " +
          double_text(r.low_freq_factor) + " and " + double_text(r.high_freq_factor));
    }
    STRATA_RETURN_IF_ERROR(
        check_positive("model.rope_scaling.original_context_length", r.original_context_length));
  }
  return Status::ok_status();
}

Status parse_model(const json& full, ModelConfig& m) {
  const json& j = full.at("model");
  STRATA_RETURN_IF_ERROR(read_enum(full, "model", "arch", &m.arch));
  m.vocab_size = j.at("vocab_size").get<int64_t>();
  m.context_length = j.at("context_length").get<int64_t>();
  m.n_layer = j.at("n_layer").get<int64_t>();
  m.n_head = j.at("n_head").get<int64_t>();
  m.n_embd = j.at("n_embd").get<int64_t>();
  m.n_kv_head = j.at("n_kv_head").get<int64_t>();
  m.ffn_hidden = j.at("ffn_hidden").get<int64_t>();
  m.rope_theta = j.at("rope_theta").get<double>();
  m.norm_eps = j.at("norm_eps").get<double>();
  m.tie_embeddings = j.at("tie_embeddings").get<bool>();
  const json& r = j.at("rope_scaling");
  STRATA_ASSIGN_OR_RETURN(
      m.rope_scaling.type,
      parse_enum<RopeScalingKind>("model.rope_scaling.type", r.at("type").get<std::string>()));
  m.rope_scaling.factor = r.at("factor").get<double>();
  m.rope_scaling.low_freq_factor = r.at("low_freq_factor").get<double>();
  m.rope_scaling.high_freq_factor = r.at("high_freq_factor").get<double>();
  m.rope_scaling.original_context_length = r.at("original_context_length").get<int64_t>();
  STRATA_RETURN_IF_ERROR(check_positive("model.vocab_size", m.vocab_size));
  STRATA_RETURN_IF_ERROR(check_positive("model.context_length", m.context_length));
  STRATA_RETURN_IF_ERROR(check_positive("model.n_layer", m.n_layer));
  STRATA_RETURN_IF_ERROR(check_positive("model.n_head", m.n_head));
  STRATA_RETURN_IF_ERROR(check_positive("model.n_embd", m.n_embd));
  STRATA_RETURN_IF_ERROR(check_non_negative("model.n_kv_head", m.n_kv_head));
  STRATA_RETURN_IF_ERROR(check_non_negative("model.ffn_hidden", m.ffn_hidden));
  if (m.n_embd % m.n_head != 0) {
    return invalid_argument("model.n_embd " + std::to_string(m.n_embd) +
                            " is not divisible by model.n_head " + std::to_string(m.n_head));
  }
  return m.arch == ModelArch::gpt2 ? check_gpt2_fields(m) : check_llama_fields(m);
}

Status parse_train(const json& full, TrainConfig& c) {
  const json& t = full.at("train");
  c.batch_size = t.at("batch_size").get<int64_t>();
  c.seq_len = t.at("seq_len").get<int64_t>();
  c.grad_accum = t.at("grad_accum").get<int64_t>();
  c.steps = t.at("steps").get<int64_t>();
  c.seed = t.at("seed").get<int64_t>();
  c.log_every = t.at("log_every").get<int64_t>();
  c.eval_every = t.at("eval_every").get<int64_t>();
  c.eval_batches = t.at("eval_batches").get<int64_t>();
  c.sample_every = t.at("sample_every").get<int64_t>();
  c.sample_tokens = t.at("sample_tokens").get<int64_t>();
  STRATA_RETURN_IF_ERROR(check_positive("train.batch_size", c.batch_size));
  STRATA_RETURN_IF_ERROR(check_positive("train.seq_len", c.seq_len));
  STRATA_RETURN_IF_ERROR(check_positive("train.grad_accum", c.grad_accum));
  STRATA_RETURN_IF_ERROR(check_non_negative("train.steps", c.steps));
  STRATA_RETURN_IF_ERROR(check_positive("train.log_every", c.log_every));
  STRATA_RETURN_IF_ERROR(check_non_negative("train.eval_every", c.eval_every));
  STRATA_RETURN_IF_ERROR(check_positive("train.eval_batches", c.eval_batches));
  STRATA_RETURN_IF_ERROR(check_non_negative("train.sample_every", c.sample_every));
  STRATA_RETURN_IF_ERROR(check_positive("train.sample_tokens", c.sample_tokens));
  if (c.seq_len > c.model.context_length) {
    return invalid_argument("train.seq_len " + std::to_string(c.seq_len) +
                            " exceeds model.context_length " +
                            std::to_string(c.model.context_length));
  }
  STRATA_RETURN_IF_ERROR(read_enum(full, "train", "schedule", &c.schedule));
  STRATA_RETURN_IF_ERROR(read_enum(full, "train", "precision", &c.precision));
  STRATA_RETURN_IF_ERROR(read_enum(full, "train", "matmul", &c.matmul));
  STRATA_RETURN_IF_ERROR(check_matmul_needs_bf16_weights(c));
  STRATA_RETURN_IF_ERROR(read_enum(full, "", "device", &c.device));
  return read_enum(full, "", "collectives", &c.collectives);
}

Status parse_optim(const json& full, OptimConfig& op) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  STRATA_RETURN_IF_ERROR(read_float(full, "optim", "lr", &op.lr));
  STRATA_RETURN_IF_ERROR(read_float(full, "optim", "min_lr_ratio", &op.min_lr_ratio));
  STRATA_RETURN_IF_ERROR(read_float(full, "optim", "beta1", &op.beta1));
  STRATA_RETURN_IF_ERROR(read_float(full, "optim", "beta2", &op.beta2));
  STRATA_RETURN_IF_ERROR(read_float(full, "optim", "eps", &op.eps));
  STRATA_RETURN_IF_ERROR(read_float(full, "optim", "weight_decay", &op.weight_decay));
  STRATA_RETURN_IF_ERROR(read_float(full, "optim", "grad_clip", &op.grad_clip));
  op.warmup_steps = full.at("optim").at("warmup_steps").get<int64_t>();
  STRATA_RETURN_IF_ERROR(check_range("optim.lr", op.lr, 0, true, kInf, true));
  STRATA_RETURN_IF_ERROR(check_range("optim.min_lr_ratio", op.min_lr_ratio, 0, false, 1, false));
  STRATA_RETURN_IF_ERROR(check_range("optim.beta1", op.beta1, 0, false, 1, true));
  STRATA_RETURN_IF_ERROR(check_range("optim.beta2", op.beta2, 0, false, 1, true));
  STRATA_RETURN_IF_ERROR(check_range("optim.eps", op.eps, 0, true, kInf, true));
  STRATA_RETURN_IF_ERROR(check_range("optim.weight_decay", op.weight_decay, 0, false, kInf, true));
  STRATA_RETURN_IF_ERROR(check_range("optim.grad_clip", op.grad_clip, 0, false, kInf, true));
  STRATA_RETURN_IF_ERROR(check_non_negative("optim.warmup_steps", op.warmup_steps));
  op.alpha.reset();
  if (full.at("optim").at("alpha") != "auto") {
    double alpha = 1;
    STRATA_RETURN_IF_ERROR(read_fraction(full, "optim", "alpha", &alpha));
    op.alpha = alpha;
  }
  return read_enum(full, "optim", "speculation", &op.speculation);
}

Status parse_data(const json& full, TrainConfig& c) {
  c.data_train = full.at("data").at("train").get<std::string>();
  if (c.data_train.empty()) {
    return invalid_argument("data.train must be \"embedded\" or a token file path, got \"\"");
  }
  c.data_val = full.at("data").at("val").get<std::string>();
  if (c.eval_every > 0 && c.data_val.empty()) {
    return invalid_argument("train.eval_every " + std::to_string(c.eval_every) +
                            " needs data.val (\"embedded\" or a token file path)");
  }
  return read_enum(full, "data", "format", &c.data_format);
}

Status parse_io(const json& full, IoConfig& i) {
  const json& io = full.at("io");
  i.queue_depth = io.at("queue_depth").get<int64_t>();
  i.block_size = io.at("block_size").get<int64_t>();
  i.workers = io.at("workers").get<int64_t>();
  i.read_bytes_per_s = io.at("read_bytes_per_s").get<int64_t>();
  i.write_bytes_per_s = io.at("write_bytes_per_s").get<int64_t>();
  i.faults = io.at("faults").get<std::string>();
  i.stripe_unit = io.at("stripe_unit").get<int64_t>();
  i.checksums = io.at("checksums").get<bool>();
  for (const json& dir : io.at("dirs")) {
    if (!dir.is_string() || dir.get<std::string>().empty()) {
      return invalid_argument("io.dirs must list directory paths, got " + show(dir));
    }
    i.dirs.push_back(dir.get<std::string>());
  }
  STRATA_RETURN_IF_ERROR(read_enum(full, "io", "engine", &i.engine));
  STRATA_RETURN_IF_ERROR(check_positive("io.queue_depth", i.queue_depth));
  STRATA_RETURN_IF_ERROR(check_positive("io.workers", i.workers));
  STRATA_RETURN_IF_ERROR(check_non_negative("io.read_bytes_per_s", i.read_bytes_per_s));
  STRATA_RETURN_IF_ERROR(check_non_negative("io.write_bytes_per_s", i.write_bytes_per_s));
  for (auto [name, v] :
       {std::pair{"io.block_size", i.block_size}, {"io.stripe_unit", i.stripe_unit}}) {
    if (v <= 0 || v % 4096 != 0) {
      return invalid_argument(std::string(name) + " must be a positive multiple of 4096, got " +
                              std::to_string(v));
    }
  }
  return Status::ok_status();
}

// memory.*, offload.* and activations.*: budgets and where state goes, checked against the
// schedule and the storage directories.
Status parse_placement(const json& full, TrainConfig& c) {
  const json& mem = full.at("memory");
  c.memory.device_bytes = mem.at("device_bytes").get<int64_t>();
  c.memory.host_bytes = mem.at("host_bytes").get<int64_t>();
  STRATA_RETURN_IF_ERROR(check_non_negative("memory.device_bytes", c.memory.device_bytes));
  STRATA_RETURN_IF_ERROR(check_non_negative("memory.host_bytes", c.memory.host_bytes));

  OffloadConfig& off = c.offload;
  STRATA_RETURN_IF_ERROR(read_fraction(full, "offload", "params_on_host", &off.params_on_host));
  STRATA_RETURN_IF_ERROR(read_fraction(full, "offload", "optim_on_host", &off.optim_on_host));
  STRATA_RETURN_IF_ERROR(
      read_fraction(full, "offload", "checkpoints_on_host", &off.checkpoints_on_host));
  STRATA_RETURN_IF_ERROR(read_fraction(full, "offload", "grads_on_host", &off.grads_on_host));
  off.embed_optim_on_host = full.at("offload").at("embed_optim_on_host").get<bool>();
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

  ActivationConfig& a = c.activations;
  STRATA_RETURN_IF_ERROR(read_enum(full, "activations", "policy", &a.policy));
  STRATA_RETURN_IF_ERROR(read_enum(full, "activations", "tier", &a.tier));
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
  // After the merge every key exists with the default's type, so the reads below cannot throw.
  TrainConfig c;
  STRATA_RETURN_IF_ERROR(parse_model(full, c.model));
  STRATA_RETURN_IF_ERROR(parse_train(full, c));
  STRATA_RETURN_IF_ERROR(parse_optim(full, c.optim));
  STRATA_RETURN_IF_ERROR(parse_data(full, c));
  STRATA_RETURN_IF_ERROR(parse_io(full, c.io));
  STRATA_RETURN_IF_ERROR(parse_placement(full, c));
  STRATA_RETURN_IF_ERROR(check_config_bounds(c));
  return c;
}

namespace {
json model_to_json(const ModelConfig& model) {
  json m = json::object();
  m["arch"] = enum_name(model.arch);
  m["vocab_size"] = model.vocab_size;
  m["context_length"] = model.context_length;
  m["n_layer"] = model.n_layer;
  m["n_head"] = model.n_head;
  m["n_embd"] = model.n_embd;
  m["n_kv_head"] = model.n_kv_head;
  m["ffn_hidden"] = model.ffn_hidden;
  m["rope_theta"] = model.rope_theta;
  json& r = m["rope_scaling"];
  r["type"] = enum_name(model.rope_scaling.type);
  r["factor"] = model.rope_scaling.factor;
  r["low_freq_factor"] = model.rope_scaling.low_freq_factor;
  r["high_freq_factor"] = model.rope_scaling.high_freq_factor;
  r["original_context_length"] = model.rope_scaling.original_context_length;
  m["norm_eps"] = model.norm_eps;
  m["tie_embeddings"] = model.tie_embeddings;
  return m;
}
}  // namespace

json config_to_json(const TrainConfig& c) {
  json j = json::object();
  j["device"] = enum_name(c.device);
  j["collectives"] = enum_name(c.collectives);
  j["model"] = model_to_json(c.model);

  json& t = j["train"];
  t["batch_size"] = c.batch_size;
  t["seq_len"] = c.seq_len;
  t["grad_accum"] = c.grad_accum;
  t["steps"] = c.steps;
  t["seed"] = c.seed;
  t["log_every"] = c.log_every;
  t["eval_every"] = c.eval_every;
  t["eval_batches"] = c.eval_batches;
  t["sample_every"] = c.sample_every;
  t["sample_tokens"] = c.sample_tokens;
  t["schedule"] = enum_name(c.schedule);
  t["precision"] = enum_name(c.precision);
  t["matmul"] = enum_name(c.matmul);

  json& o = j["optim"];
  o["lr"] = float_json(c.optim.lr);
  o["min_lr_ratio"] = float_json(c.optim.min_lr_ratio);
  o["beta1"] = float_json(c.optim.beta1);
  o["beta2"] = float_json(c.optim.beta2);
  o["eps"] = float_json(c.optim.eps);
  o["weight_decay"] = float_json(c.optim.weight_decay);
  o["grad_clip"] = float_json(c.optim.grad_clip);
  o["warmup_steps"] = c.optim.warmup_steps;
  o["alpha"] = c.optim.alpha ? json(*c.optim.alpha) : json("auto");
  o["speculation"] = enum_name(c.optim.speculation);

  json& d = j["data"];
  d["train"] = c.data_train;
  d["val"] = c.data_val;
  d["format"] = enum_name(c.data_format);

  json& io = j["io"];
  io["engine"] = enum_name(c.io.engine);
  io["queue_depth"] = c.io.queue_depth;
  io["block_size"] = c.io.block_size;
  io["workers"] = c.io.workers;
  io["read_bytes_per_s"] = c.io.read_bytes_per_s;
  io["write_bytes_per_s"] = c.io.write_bytes_per_s;
  io["faults"] = c.io.faults;
  io["dirs"] = c.io.dirs;
  io["stripe_unit"] = c.io.stripe_unit;
  io["checksums"] = c.io.checksums;

  // Doubles go in as they are (a dump prints the shortest text that reads back exactly). They stay
  // JSON floats when integral (0.0, 1.0), so the default types these keys as numbers and
  // merge_value takes 1 and 0.25 alike.
  json& mem = j["memory"];
  mem["device_bytes"] = c.memory.device_bytes;
  mem["host_bytes"] = c.memory.host_bytes;

  json& act = j["activations"];
  act["policy"] = enum_name(c.activations.policy);
  act["tier"] = enum_name(c.activations.tier);
  json& off = j["offload"];
  off["params_on_host"] = c.offload.params_on_host;
  off["optim_on_host"] = c.offload.optim_on_host;
  off["checkpoints_on_host"] = c.offload.checkpoints_on_host;
  off["grads_on_host"] = c.offload.grads_on_host;
  off["embed_optim_on_host"] = c.offload.embed_optim_on_host;
  return j;
}

namespace {
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

std::optional<FieldDifference> model_difference(const ModelConfig& a, const ModelConfig& b) {
  std::optional<FieldDifference> out;
  first_difference(model_to_json(a), model_to_json(b), "model", out);
  return out;
}

}  // namespace strata
