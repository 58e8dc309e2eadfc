// Hugging Face config.json <-> ModelConfig; Note [Hugging Face configs] in hf_config.h.
#include "model/hf_config.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "core/json_util.h"

namespace strata {

namespace {

using nlohmann::json;

// Field readers over one config.json: every error is one line naming the file and the field.
class HfFields {
 public:
  HfFields(const json& j, const std::string& path) : j_(j), path_(path) {}

  const json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  Status error(const std::string& what) const { return bad_format(path_ + ": " + what); }
  Status wrong(const char* key, const char* want, const json& got) const {
    return error(std::string(key) + " must be " + want + ", got " + json_preview(got));
  }
  Status missing(const char* key) const {
    return error(std::string(key) + " is missing (a " + model_type_ + " config.json needs it)");
  }
  void set_model_type(const std::string& t) { model_type_ = t; }

  // A positive integer; `fallback` when absent (nullopt: required).
  Result<int64_t> positive(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const json* v = find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return missing(key);
    }
    // An unsigned value above int64's range reads as negative.
    if (!v->is_number_integer() || v->get<int64_t>() < 1) {
      return wrong(key, "a positive integer", *v);
    }
    return v->get<int64_t>();
  }
  Result<double> number(const char* key, std::optional<double> fallback = std::nullopt) const {
    const json* v = find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return missing(key);
    }
    if (!v->is_number()) return wrong(key, "a number", *v);
    return v->get<double>();
  }
  Result<bool> boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return wrong(key, "true or false", *v);
    return v->get<bool>();
  }
  Result<std::string> text(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) return wrong(key, "a string", *v);
    return v->get<std::string>();
  }

 private:
  const json& j_;
  const std::string& path_;
  std::string model_type_;
};

// The field must have the value Strata's model computes with: "<key> is <got>: Strata's <arch>
// needs <want>".
Status needs(const HfFields& f, const char* key, const std::string& got, const std::string& want,
             const char* arch) {
  return f.error(std::string(key) + " is " + got + ": Strata's " + arch + " supports only " + want);
}

Status read_gpt2(const HfFields& f, ModelConfig& m) {
  m.arch = ModelArch::gpt2;
  STRATA_ASSIGN_OR_RETURN(m.n_embd, f.positive("n_embd"));
  STRATA_ASSIGN_OR_RETURN(m.n_layer, f.positive("n_layer"));
  STRATA_ASSIGN_OR_RETURN(m.n_head, f.positive("n_head"));
  STRATA_ASSIGN_OR_RETURN(m.vocab_size, f.positive("vocab_size"));
  STRATA_ASSIGN_OR_RETURN(m.context_length, f.positive("n_positions"));
  STRATA_ASSIGN_OR_RETURN(const int64_t n_ctx, f.positive("n_ctx", m.context_length));
  if (n_ctx != m.context_length) {
    return f.error("n_ctx " + std::to_string(n_ctx) + " differs from n_positions " +
                   std::to_string(m.context_length));
  }
  STRATA_ASSIGN_OR_RETURN(const std::string act, f.text("activation_function", "gelu_new"));
  if (act != "gelu_new")
    return needs(f, "activation_function", "'" + act + "'", "gelu_new", "gpt2");
  STRATA_ASSIGN_OR_RETURN(const double eps, f.number("layer_norm_epsilon", 1e-5));
  if (eps != 1e-5) {
    return needs(f, "layer_norm_epsilon", json_preview(*f.find("layer_norm_epsilon")), "1e-05",
                 "gpt2");
  }
  STRATA_ASSIGN_OR_RETURN(const int64_t inner, f.positive("n_inner", 4 * m.n_embd));
  if (inner != 4 * m.n_embd) {
    return needs(f, "n_inner", std::to_string(inner), "null or 4 * n_embd", "gpt2");
  }
  STRATA_ASSIGN_OR_RETURN(const bool tied, f.boolean("tie_word_embeddings", true));
  if (!tied) return needs(f, "tie_word_embeddings", "false", "true (a tied LM head)", "gpt2");
  STRATA_ASSIGN_OR_RETURN(const bool scaled, f.boolean("scale_attn_weights", true));
  if (!scaled) return needs(f, "scale_attn_weights", "false", "true", "gpt2");
  STRATA_ASSIGN_OR_RETURN(const bool by_layer, f.boolean("scale_attn_by_inverse_layer_idx", false));
  if (by_layer) return needs(f, "scale_attn_by_inverse_layer_idx", "true", "false", "gpt2");
  return Status();
}

Status read_rope_scaling(const HfFields& f, RopeScaling& r) {
  const json* s = f.find("rope_scaling");
  if (s == nullptr) return Status();  // none
  if (!s->is_object()) return f.wrong("rope_scaling", "null or an object", *s);
  auto field = [&](const char* key) { return std::string("rope_scaling.") + key; };
  const json* type = s->contains("rope_type") ? &s->at("rope_type")
                     : s->contains("type")    ? &s->at("type")
                                              : nullptr;
  if (type == nullptr || !type->is_string()) {
    return f.error("rope_scaling has no rope_type (Strata supports only llama3)");
  }
  const std::string t = type->get<std::string>();
  if (t == "default") return Status();  // HF's name for no scaling
  if (t != "llama3") {
    return f.error("rope_scaling.rope_type '" + t +
                   "' is not supported (Strata supports only llama3 rope scaling)");
  }
  r.type = RopeScalingKind::llama3;
  auto value = [&](const char* key) -> const json* {
    auto it = s->find(key);
    return it == s->end() || it->is_null() ? nullptr : &*it;
  };
  auto number = [&](const char* key) -> Result<double> {
    const json* v = value(key);
    if (v == nullptr) return f.error(field(key) + " is missing (llama3 rope scaling needs it)");
    if (!v->is_number()) return f.error(field(key) + " must be a number, got " + json_preview(*v));
    return v->get<double>();
  };
  STRATA_ASSIGN_OR_RETURN(r.factor, number("factor"));
  STRATA_ASSIGN_OR_RETURN(r.low_freq_factor, number("low_freq_factor"));
  STRATA_ASSIGN_OR_RETURN(r.high_freq_factor, number("high_freq_factor"));
  const char* original = "original_max_position_embeddings";
  const json* o = value(original);
  if (o == nullptr) return f.error(field(original) + " is missing (llama3 rope scaling needs it)");
  if (!o->is_number_integer() || o->get<int64_t>() < 1) {  // above int64's range: negative
    return f.error(field(original) + " must be a positive integer, got " + json_preview(*o));
  }
  r.original_context_length = o->get<int64_t>();
  return Status();
}

Status read_llama(const HfFields& f, ModelConfig& m) {
  m.arch = ModelArch::llama;
  STRATA_ASSIGN_OR_RETURN(m.n_embd, f.positive("hidden_size"));
  STRATA_ASSIGN_OR_RETURN(m.n_layer, f.positive("num_hidden_layers"));
  STRATA_ASSIGN_OR_RETURN(m.n_head, f.positive("num_attention_heads"));
  STRATA_ASSIGN_OR_RETURN(m.n_kv_head, f.positive("num_key_value_heads", m.n_head));
  STRATA_ASSIGN_OR_RETURN(m.ffn_hidden, f.positive("intermediate_size"));
  STRATA_ASSIGN_OR_RETURN(m.vocab_size, f.positive("vocab_size"));
  STRATA_ASSIGN_OR_RETURN(m.context_length, f.positive("max_position_embeddings"));
  STRATA_ASSIGN_OR_RETURN(m.rope_theta, f.number("rope_theta", 10000.0));
  STRATA_RETURN_IF_ERROR(read_rope_scaling(f, m.rope_scaling));
  STRATA_ASSIGN_OR_RETURN(m.norm_eps, f.number("rms_norm_eps", 1e-6));
  STRATA_ASSIGN_OR_RETURN(m.tie_embeddings, f.boolean("tie_word_embeddings", false));
  STRATA_ASSIGN_OR_RETURN(const std::string act, f.text("hidden_act", "silu"));
  if (act != "silu") return needs(f, "hidden_act", "'" + act + "'", "silu", "llama");
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    STRATA_ASSIGN_OR_RETURN(const bool on, f.boolean(bias, false));
    if (on) return needs(f, bias, "true", "false (no biases)", "llama");
  }
  if (m.n_embd % m.n_head != 0) {
    return f.error("hidden_size " + std::to_string(m.n_embd) +
                   " is not divisible by num_attention_heads " + std::to_string(m.n_head));
  }
  STRATA_ASSIGN_OR_RETURN(const int64_t head_dim, f.positive("head_dim", m.n_embd / m.n_head));
  if (head_dim != m.n_embd / m.n_head) {
    return needs(f, "head_dim", std::to_string(head_dim),
                 "hidden_size / num_attention_heads = " + std::to_string(m.n_embd / m.n_head),
                 "llama");
  }
  if (m.n_head % m.n_kv_head != 0) {
    return f.error("num_attention_heads " + std::to_string(m.n_head) +
                   " is not a multiple of num_key_value_heads " + std::to_string(m.n_kv_head));
  }
  return Status();
}

}  // namespace

Result<ModelConfig> model_config_from_hf(const json& j, const std::string& path) {
  HfFields f(j, path);
  if (!j.is_object()) return f.error("is not a JSON object");
  const json* type = f.find("model_type");
  if (type == nullptr) return f.error("model_type is missing (supported: gpt2, llama)");
  if (!type->is_string()) return f.wrong("model_type", "a string", *type);
  const std::string t = type->get<std::string>();
  f.set_model_type(t);
  ModelConfig m;
  if (t == "gpt2") {
    STRATA_RETURN_IF_ERROR(read_gpt2(f, m));
  } else if (t == "llama") {
    STRATA_RETURN_IF_ERROR(read_llama(f, m));
  } else {
    return f.error("model_type " + json_preview(*type) +
                   " is not supported (Strata imports gpt2 and llama)");
  }
  // parse_config's checks of the model (bounds, divisibility), with a batch every model fits.
  TrainConfig c;
  c.model = m;
  json full = config_to_json(c);
  full["train"]["seq_len"] = 1;
  full["train"]["batch_size"] = 1;
  auto parsed = parse_config(full);
  if (!parsed.ok()) return f.error(parsed.status().message());
  return m;
}

ModelConfig hf_canonical(const ModelConfig& m) {
  ModelConfig c = m;
  const ModelConfig defaults;
  if (c.arch == ModelArch::gpt2) {
    c.n_kv_head = defaults.n_kv_head;
    c.ffn_hidden = defaults.ffn_hidden;
    c.rope_theta = defaults.rope_theta;
    c.rope_scaling = defaults.rope_scaling;
    c.norm_eps = defaults.norm_eps;
    c.tie_embeddings = true;
    return c;
  }
  c.n_kv_head = m.kv_heads();
  c.ffn_hidden = m.ffn();
  if (c.rope_scaling.type == RopeScalingKind::none) c.rope_scaling = defaults.rope_scaling;
  return c;
}

std::string hf_config_json_for(const ModelConfig& c) {
  if (c.arch == ModelArch::gpt2) {
    const json j = {{"model_type", "gpt2"},       {"architectures", {"GPT2LMHeadModel"}},
                    {"vocab_size", c.vocab_size}, {"n_positions", c.context_length},
                    {"n_ctx", c.context_length},  {"n_embd", c.n_embd},
                    {"n_layer", c.n_layer},       {"n_head", c.n_head},
                    {"n_inner", nullptr},         {"activation_function", "gelu_new"},
                    {"layer_norm_epsilon", 1e-5}, {"tie_word_embeddings", true},
                    {"resid_pdrop", 0.0},         {"embd_pdrop", 0.0},
                    {"attn_pdrop", 0.0},          {"torch_dtype", "float32"}};
    return j.dump(2) + "\n";
  }
  json rope = nullptr;
  if (c.rope_scaling.type == RopeScalingKind::llama3) {
    rope = {{"rope_type", "llama3"},
            {"factor", c.rope_scaling.factor},
            {"low_freq_factor", c.rope_scaling.low_freq_factor},
            {"high_freq_factor", c.rope_scaling.high_freq_factor},
            {"original_max_position_embeddings", c.rope_scaling.original_context_length}};
  }
  const json j = {{"model_type", "llama"},
                  {"architectures", {"LlamaForCausalLM"}},
                  {"vocab_size", c.vocab_size},
                  {"hidden_size", c.n_embd},
                  {"intermediate_size", c.ffn()},
                  {"num_hidden_layers", c.n_layer},
                  {"num_attention_heads", c.n_head},
                  {"num_key_value_heads", c.kv_heads()},
                  {"head_dim", c.head_size()},
                  {"max_position_embeddings", c.context_length},
                  {"rope_theta", c.rope_theta},
                  {"rope_scaling", rope},
                  {"rms_norm_eps", c.norm_eps},
                  {"tie_word_embeddings", c.tie_embeddings},
                  {"hidden_act", "silu"},
                  {"attention_bias", false},
                  {"mlp_bias", false},
                  {"attention_dropout", 0.0},
                  {"initializer_range", 0.02},
                  {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

}  // namespace strata
