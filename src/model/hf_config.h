// Hugging Face config.json <-> Strata's ModelConfig: read for `strata train --init-from`
// (formats/hf_import.h), written beside every `strata export` (formats/hf_export.h).
//
// Note [Hugging Face configs]
// Two of HF's model types are Strata models:
//   "gpt2"  (GPT2Config)  n_embd, n_layer, n_head, vocab_size, n_positions (-> context_length;
//           n_ctx, when present, must equal it). What Strata's GPT-2 fixes must hold:
//           activation_function gelu_new, layer_norm_epsilon 1e-5, n_inner null or 4 * n_embd,
//           tied embeddings, scale_attn_weights true, scale_attn_by_inverse_layer_idx false.
//           Absent fields take GPT2Config's defaults (which are these).
//   "llama" (LlamaConfig) hidden_size, num_hidden_layers, num_attention_heads,
//           num_key_value_heads (absent: num_attention_heads), intermediate_size, vocab_size,
//           max_position_embeddings, rope_theta (absent: 10000), rope_scaling (null, or
//           {"rope_type" (or "type"): "llama3", factor, low_freq_factor, high_freq_factor,
//           original_max_position_embeddings}; "default" means none), rms_norm_eps (absent:
//           1e-6, LlamaConfig's default), tie_word_embeddings (absent: false). Refused: bias
//           in attention or MLP (attention_bias, mlp_bias), hidden_act other than silu, a
//           head_dim other than hidden_size / num_attention_heads, another rope scaling.
// Any other model_type ("qwen2", "mistral", ...) is refused by name, as is any field above
// missing, of the wrong type or out of range: one line naming the file and HF's field. Fields
// that change nothing Strata computes (dropout, token ids, initializer_range, torch_dtype, ...)
// are ignored. The result then passes parse_config's model checks (bounds, divisibility).
//
// The canonical form: a ModelConfig spells some things in several ways (n_kv_head 0 or n_head,
// ffn_hidden 0 or 4 * n_embd, the rope scaling numbers when there is no scaling). The form read
// from HF is hf_canonical's: GPT-2 with every Llama field at its default; Llama with n_kv_head
// and ffn_hidden spelled out and the rope scaling numbers at their defaults when there is none.
// So model_config_from_hf(hf_config_json_for(m)) == hf_canonical(m), which is m itself when m
// is canonical (model_difference finds nothing).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/config.h"
#include "core/status.h"

namespace strata {

// The model of HF's config.json `j` (Note [Hugging Face configs]). bad_format naming `path` and
// the field for anything Strata cannot train as that model.
Result<ModelConfig> model_config_from_hf(const nlohmann::json& j, const std::string& path);

// HF's config.json for `m`: a GPT2Config (architectures GPT2LMHeadModel) or a LlamaConfig
// (LlamaForCausalLM), torch_dtype float32, dropout 0.
std::string hf_config_json_for(const ModelConfig& m);

// `m` in the form model_config_from_hf returns (Note [Hugging Face configs]).
ModelConfig hf_canonical(const ModelConfig& m);

}  // namespace strata
