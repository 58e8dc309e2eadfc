#include "model/lora.h"

#include <algorithm>
#include <cstdio>

#include "core/check.h"
#include "core/dropout_mask.h"
#include "core/format.h"

namespace strata {

const std::vector<LoraModule>& lora_modules(ModelArch arch) {
  using L = BlockLinear;
  static const std::vector<LoraModule> llama = {
      {"self_attn.q_proj", L::qkv},  {"self_attn.k_proj", L::qkv}, {"self_attn.v_proj", L::qkv},
      {"self_attn.o_proj", L::proj}, {"mlp.gate_proj", L::fc},     {"mlp.up_proj", L::fc},
      {"mlp.down_proj", L::fcproj}};
  static const std::vector<LoraModule> gpt2 = {{"attn.c_attn", L::qkv},
                                               {"attn.c_proj", L::proj},
                                               {"mlp.c_fc", L::fc},
                                               {"mlp.c_proj", L::fcproj}};
  return arch == ModelArch::llama ? llama : gpt2;
}

LoraGeometry lora_geometry(const ModelConfig& m, int slot) {
  const auto& mods = lora_modules(m.arch);
  STRATA_CHECK(slot >= 0 && slot < static_cast<int>(mods.size()));
  const int64_t C = m.n_embd, Ckv = m.kv_width(), F = m.ffn();
  using L = BlockLinear;
  if (m.arch == ModelArch::gpt2) {
    switch (slot) {
      case 0:
        return {L::qkv, C, 0, 3 * C, 3 * C};
      case 1:
        return {L::proj, C, 0, C, C};
      case 2:
        return {L::fc, C, 0, 4 * C, 4 * C};
      default:
        return {L::fcproj, 4 * C, 0, C, C};
    }
  }
  const int64_t W = C + 2 * Ckv;
  switch (slot) {
    case 0:
      return {L::qkv, C, 0, C, W};
    case 1:
      return {L::qkv, C, C, Ckv, W};
    case 2:
      return {L::qkv, C, C + Ckv, Ckv, W};
    case 3:
      return {L::proj, C, 0, C, C};
    case 4:
      return {L::fc, C, 0, F, 2 * F};
    case 5:
      return {L::fc, C, F, F, 2 * F};
    default:
      return {L::fcproj, F, 0, C, C};
  }
}

namespace {

// PEFT's match: the module's path is the name, or ends in "." + name.
bool name_matches(const std::string& path, const std::string& name) {
  if (path == name) return true;
  return path.size() > name.size() &&
         path.compare(path.size() - name.size(), name.size(), name) == 0 &&
         path[path.size() - name.size() - 1] == '.';
}

std::string module_list(ModelArch arch) {
  std::string out;
  for (const LoraModule& mod : lora_modules(arch))
    out += (out.empty() ? "" : ", ") + std::string(mod.hf_path);
  return out;
}

Status check_targets(const ModelConfig& m, const LoraConfig& lora) {
  if (lora.targets.empty()) {
    return invalid_argument(
        "lora.targets is empty: name the linear layers to adapt, or all-linear");
  }
  const auto& mods = lora_modules(m.arch);
  for (const std::string& name : lora.targets) {
    if (name == "all-linear") continue;
    const bool any = std::any_of(mods.begin(), mods.end(), [&](const LoraModule& mod) {
      return name_matches(mod.hf_path, name);
    });
    if (any) continue;
    if (name == "lm_head" || name == "embed_tokens" || name == "wte") {
      return invalid_argument("lora.targets names " + excerpt(name) +
                              ", which is not a block's linear layer: train it in full with "
                              "lora.modules_to_save");
    }
    return invalid_argument("lora.targets names " + excerpt(name) +
                            ", which matches no linear layer of a " + enum_name(m.arch) +
                            " block (" + module_list(m.arch) + ", or all-linear)");
  }
  return Status::ok_status();
}

Status check_saved(const ModelConfig& m, const LoraConfig& lora) {
  for (const std::string& name : lora.modules_to_save) {
    const bool known =
        name == "lm_head" || (m.arch == ModelArch::llama ? name == "embed_tokens" : name == "wte");
    if (!known) {
      return invalid_argument(
          "lora.modules_to_save names " + excerpt(name) + ": a " + enum_name(m.arch) +
          " model can train in full only " +
          (m.arch == ModelArch::llama ? "embed_tokens and lm_head" : "wte and lm_head"));
    }
  }
  return Status::ok_status();
}

}  // namespace

std::array<bool, kLoraSlots> lora_targeted(const ModelConfig& m, const LoraConfig& lora) {
  std::array<bool, kLoraSlots> on{};
  const auto& mods = lora_modules(m.arch);
  for (size_t s = 0; s < mods.size(); s++) {
    for (const std::string& name : lora.targets) {
      if (name == "all-linear" || name_matches(mods[s].hf_path, name)) on[s] = true;
    }
  }
  return on;
}

Status check_lora(const TrainConfig& cfg) {
  const ModelConfig& m = cfg.model;
  const LoraConfig& lora = cfg.lora;
  if (!lora.enabled()) return Status::ok_status();
  STRATA_RETURN_IF_ERROR(check_targets(m, lora));
  STRATA_RETURN_IF_ERROR(check_saved(m, lora));
  const auto on = lora_targeted(m, lora);
  const auto& mods = lora_modules(m.arch);
  for (size_t s = 0; s < mods.size(); s++) {
    if (!on[s]) continue;
    const LoraGeometry g = lora_geometry(m, static_cast<int>(s));
    const int64_t most = std::min(g.in, g.out);
    if (lora.rank > most) {
      return invalid_argument("lora.rank " + std::to_string(lora.rank) + " is above " +
                              std::string(mods[s].hf_path) + "'s smaller side " +
                              std::to_string(most) + " (a rank is at most min(in, out))");
    }
  }
  if (lora.dropout >= 1) {  // the config's bounds give [0, 1]; 1 would drop every input
    char shown[32];
    std::snprintf(shown, sizeof shown, "%g", static_cast<double>(lora.dropout));
    return invalid_argument(std::string("lora.dropout ") + shown +
                            " drops every input of the adapters; it must be below 1");
  }
  if (lora.base_precision == BasePrecision::int8 || lora.base_precision == BasePrecision::nf4) {
    return invalid_argument(std::string("lora.base_precision ") + enum_name(lora.base_precision) +
                            ": a quantized base is not implemented yet; use auto or bf16");
  }
  if (lora.base_precision == BasePrecision::bf16 && cfg.precision != Precision::bf16) {
    return invalid_argument(
        "lora.base_precision bf16 needs train.precision bf16 (the base is the working weights)");
  }
  return Status::ok_status();
}

LoraSaved lora_saved(const ModelConfig& m, const LoraConfig& lora) {
  LoraSaved s;
  if (!lora.enabled()) return {true, true};
  for (const std::string& name : lora.modules_to_save) {
    if (name == "embed_tokens" || name == "wte") s.wte = true;
    if (name == "lm_head")
      (m.tie_embeddings || m.arch == ModelArch::gpt2 ? s.wte : s.lm_head) = true;
  }
  return s;
}

uint64_t lora_dropout_key(const LoraDropoutAt& at, int64_t layer) {
  uint64_t h = splitmix64(at.seed);
  h = splitmix64(h ^ static_cast<uint64_t>(at.step));
  h = splitmix64(h ^ static_cast<uint64_t>(at.micro_batch));
  return splitmix64(h ^ static_cast<uint64_t>(layer));
}

uint64_t lora_dropout_stream(uint64_t key, int slot) {
  return splitmix64(key ^ static_cast<uint64_t>(slot));
}

}  // namespace strata
