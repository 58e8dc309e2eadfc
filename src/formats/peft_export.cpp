// PEFT adapter export; Note [PEFT adapter export] in formats/peft_export.h.
#include "formats/peft_export.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "core/output_file.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

constexpr const char* kPeftPrefix = "base_model.model.";
constexpr const char* kAdapterWeights = "adapter_model.safetensors";
constexpr const char* kAdapterConfig = "adapter_config.json";

std::string last_part(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// The adapter file's name of a tensor modules_to_save trained: its HF parameter name under PEFT's
// prefix, GPT-2's as GPT2LMHeadModel (which PEFT wraps) names it, as the adapters' names are.
std::string saved_tensor_name(const ParamLayout& layout, const ParamTensor& t) {
  const bool gpt2 = layout.config.arch == ModelArch::gpt2;
  return std::string(kPeftPrefix) + (gpt2 ? "transformer." : "") + t.hf_name;
}

// What the adapter file holds: the plan's adapter tensors and the trained base tensors, in
// layout order, each renamed to its name in the file.
std::vector<StEntry> adapter_entries(const HfExportPlan& plan, int64_t* parameters) {
  std::vector<StEntry> out;
  *parameters = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const ParamTensor& t = plan.layout.tensors[i];
    if (t.frozen) continue;
    StEntry e = plan.tensors[i];
    e.name = t.lora_slot >= 0 ? t.hf_name : saved_tensor_name(plan.layout, t);
    *parameters += t.numel();
    out.push_back(std::move(e));
  }
  return out;
}

// alpha as PEFT writes it: an integer when it is one (its LoraConfig types it int).
nlohmann::ordered_json alpha_json(float alpha) {
  const double a = static_cast<double>(alpha);
  if (std::floor(a) == a && std::fabs(a) < 1e15) return static_cast<int64_t>(a);
  return a;
}

}  // namespace

std::vector<std::string> peft_target_modules(ModelArch arch,
                                             const std::array<bool, kLoraSlots>& on) {
  const auto& mods = lora_modules(arch);
  std::vector<std::string> names;
  for (size_t s = 0; s < mods.size(); ++s) {
    if (!on[s]) continue;
    const std::string leaf = last_part(mods[s].hf_path);
    // The leaf alone would also match a module of the same leaf that is not adapted.
    bool all_adapted = true;
    for (size_t o = 0; o < mods.size(); ++o) {
      if (last_part(mods[o].hf_path) == leaf && !on[o]) all_adapted = false;
    }
    const std::string name = all_adapted ? leaf : std::string(mods[s].hf_path);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

std::vector<std::string> peft_modules_to_save(const ParamLayout& layout) {
  std::vector<std::string> names;
  if (!layout.lora.enabled()) return names;
  const bool llama = layout.config.arch == ModelArch::llama;
  for (const ParamTensor& t : layout.tensors) {
    if (t.frozen || t.lora_slot >= 0) continue;
    if (t.name == "wte.weight") names.emplace_back(llama ? "embed_tokens" : "wte");
    if (t.name == "lm_head.weight") names.emplace_back("lm_head");
  }
  return names;
}

std::string peft_adapter_config_json(const HfExportPlan& plan) {
  const LoraConfig& lora = plan.layout.lora;
  const std::vector<std::string> saved = peft_modules_to_save(plan.layout);
  nlohmann::ordered_json c;
  c["peft_type"] = "LORA";
  c["task_type"] = "CAUSAL_LM";
  c["r"] = lora.rank;
  c["lora_alpha"] = alpha_json(lora.alpha);
  c["lora_dropout"] = lora.dropout;
  c["target_modules"] = peft_target_modules(plan.model.arch, plan.layout.lora_on);
  // PEFT's flag for a layer that stores W as (in, out): GPT-2's Conv1D.
  c["fan_in_fan_out"] = plan.model.arch == ModelArch::gpt2;
  c["modules_to_save"] =
      saved.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(saved);
  c["bias"] = "none";
  c["use_rslora"] = false;
  c["use_dora"] = false;
  c["init_lora_weights"] = true;
  // Note [Base model]: the directory --init-from read; empty for a base trained here (PEFT then
  // takes the base model from the caller).
  c["base_model_name_or_path"] =
      plan.base_model.is_null() ? std::string() : plan.base_model["path"].get<std::string>();
  return c.dump(2) + "\n";
}

Result<ExportKind> choose_export(const TrainConfig& cfg, const std::string& checkpoint, bool merge,
                                 bool sharded) {
  if (!cfg.lora.enabled()) {
    if (!merge) return ExportKind::model;
    return invalid_argument("--merge: checkpoint " + checkpoint +
                            " has no LoRA adapters (lora.rank 0); export it without --merge");
  }
  if (merge) return ExportKind::merged;
  if (sharded) {
    return invalid_argument(
        "--shard-size: a PEFT adapter is one file; add --merge to export the "
        "merged model in shards");
  }
  return ExportKind::adapter;
}

Status check_peft_export_out(const std::string& out) {
  if (out.empty()) return invalid_argument("--out is empty");
  const std::string suffix = ".safetensors";
  std::error_code ec;
  if (out.size() > suffix.size() &&
      out.compare(out.size() - suffix.size(), suffix.size(), suffix) == 0 &&
      !fs::is_directory(out, ec)) {
    return invalid_argument("--out " + out + ": a PEFT adapter is a directory (" + kAdapterWeights +
                            ", " + kAdapterConfig +
                            "); give one, or --merge for a single model file");
  }
  STRATA_RETURN_IF_ERROR(check_output_dir(out, "adapter directory"));
  for (const char* name : {kAdapterWeights, kAdapterConfig}) {
    STRATA_RETURN_IF_ERROR(check_output_path((fs::path(out) / name).string(), "adapter file"));
  }
  return Status::ok_status();
}

Result<PeftExportFiles> write_peft_adapter(const HfExportPlan& plan, const std::string& out,
                                           const CheckpointReadOptions& options) {
  if (!plan.lora()) {
    return invalid_argument("checkpoint " + plan.checkpoint +
                            " has no LoRA adapters (lora.rank 0): nothing to write as a PEFT "
                            "adapter");
  }
  STRATA_RETURN_IF_ERROR(check_peft_export_out(out));
  if (options.chunk_bytes <= 0) {
    return invalid_argument("export copy chunk of " + std::to_string(options.chunk_bytes) +
                            " bytes; it must be positive");
  }
  STRATA_RETURN_IF_ERROR(prepare_export_dir(out, out, plan.checkpoint));

  PeftExportFiles files;
  const std::vector<StEntry> entries = adapter_entries(plan, &files.parameters);
  files.tensors = static_cast<int64_t>(entries.size());
  int64_t largest = 1;
  for (const StEntry& e : entries) largest = std::max(largest, e.bytes);
  STRATA_ASSIGN_OR_RETURN(ReadOnlyFile src,
                          ReadOnlyFile::open(plan.weights_path, "checkpoint file"));
  if (options.stats != nullptr) src.count_reads_in(&options.stats->reads);
  std::vector<uint8_t> chunk(static_cast<size_t>(std::min(options.chunk_bytes, largest)));
  if (options.stats != nullptr) options.stats->note_buffers(static_cast<int64_t>(chunk.size()));

  files.weights = (fs::path(out) / kAdapterWeights).string();
  STRATA_RETURN_IF_ERROR(write_copied_tensors(src, entries, files.weights, chunk));
  files.config = (fs::path(out) / kAdapterConfig).string();
  STRATA_RETURN_IF_ERROR(
      write_output_file(files.config, peft_adapter_config_json(plan), "adapter config"));
  return files;
}

}  // namespace strata
