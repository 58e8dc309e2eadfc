// Hugging Face config.json <-> Strata's ModelConfig: read for `strata train --init-from`
// (formats/hf_import.h), written beside every `strata export` (formats/hf_export.h).
//
// Note [Hugging Face configs]
// Two of HF's model types are Strata models: "gpt2" (GPT2Config) and "llama" (LlamaConfig).
// model_config_from_hf reads their shape fields, an absent one taking HF's default (n_ctx, when
// present, must equal n_positions), and refuses, in one line naming the file and HF's field: any
// other model_type ("qwen2", ...); a field missing, mistyped or out of range; what Strata would
// compute differently (GPT-2: activation not gelu_new, layer_norm_epsilon not 1e-5, n_inner not
// 4 * n_embd, untied, other attention scaling; Llama: biases, hidden_act not silu, head_dim not
// hidden_size / heads, rope scaling but llama3's). Fields that change nothing Strata computes
// (dropout, token ids, torch_dtype, ...) are ignored; the result passes parse_config's checks.
// hf_canonical is the form read from HF, one spelling per model: GPT-2 with Llama's fields at
// default; Llama with n_kv_head and ffn_hidden spelled out, rope numbers default when unscaled.
// So model_config_from_hf(hf_config_json_for(m)) == hf_canonical(m), m itself when canonical.
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
