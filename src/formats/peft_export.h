// A LoRA checkpoint's adapter as Hugging Face PEFT saves one: `strata export` of a checkpoint
// whose config has lora.rank > 0 (Note [LoRA] in model/lora.h).
//
// Note [PEFT adapter export]
// `out` is a directory (made when missing) that receives two files:
//   adapter_model.safetensors: every adapter tensor under its PEFT name
//     (base_model.model.<HF module path>.lora_A.weight (r, in), .lora_B.weight (out, r); the
//     layout already names them so, model/layout.cpp), and each tensor lora.modules_to_save
//     trained in full as base_model.model.<HF parameter name> (GPT2LMHeadModel's for GPT-2:
//     transformer.wte.weight); all F32, in layout order, metadata format "pt". Nothing of the
//     frozen base: PEFT loads the adapter over the base model it was trained from.
//   adapter_config.json: PEFT's LoraConfig (peft_adapter_config_json).
// As the model export (Note [Streaming export]): the checkpoint's model.safetensors is verified
// by plan_hf_export, the tensors are copied as byte ranges through one chunk, and each file is an
// OutputFile, checked before the first byte (check_peft_export_out), the config written last.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/checkpoint.h"
#include "formats/hf_export.h"
#include "model/lora.h"

namespace strata {

// The leaf module names PEFT's target_modules needs to match exactly the adapted modules
// (`on`, by slot) of every layer, by PEFT's rule (a module matches a name it equals or ends with
// after a '.'): a module's last part ("q_proj", "c_attn") when every module of that last part is
// adapted, else its path in the layer ("attn.c_proj" without "mlp.c_proj"). In slot order.
std::vector<std::string> peft_target_modules(ModelArch arch,
                                             const std::array<bool, kLoraSlots>& on);

// The modules lora.modules_to_save trained in full, as PEFT names them in the adapter's config:
// "wte" (GPT-2's embedding, also its tied head), "embed_tokens" (Llama's, also a tied head),
// "lm_head" (an untied head). Empty when none.
std::vector<std::string> peft_modules_to_save(const ParamLayout& layout);

// adapter_config.json of a LoRA plan: peft_type LORA, task_type CAUSAL_LM, r, lora_alpha,
// lora_dropout, target_modules, fan_in_fan_out (true for GPT-2, whose Conv1D holds W
// transposed), modules_to_save (null or a list), bias "none", use_rslora and use_dora false,
// init_lora_weights true and base_model_name_or_path: the --init-from directory (Note [Base
// model]), "" for a base trained here.
std::string peft_adapter_config_json(const HfExportPlan& plan);

// Refuses (invalid_argument) an `out` that is not a directory (a FIFO, a file, a link to one, a
// name ending in .safetensors), or whose adapter_model.safetensors or adapter_config.json exists
// and is not a regular file. write_peft_adapter checks it first too.
Status check_peft_export_out(const std::string& out);

// What `strata export` writes of a checkpoint whose run had `cfg`: a full checkpoint's model; a
// LoRA checkpoint's PEFT adapter, or with `merge` its merged model (Note [Merged export] in
// formats/lora_merge.h). invalid_argument, one line naming the flag, for `merge` without LoRA and
// for `sharded` (--shard-size) with an adapter, which is one file.
enum class ExportKind { model, adapter, merged };
Result<ExportKind> choose_export(const TrainConfig& cfg, const std::string& checkpoint, bool merge,
                                 bool sharded);

struct PeftExportFiles {
  std::string weights;  // DIR/adapter_model.safetensors
  std::string config;   // DIR/adapter_config.json
  int64_t tensors = 0, parameters = 0;
};

// Writes the adapter of a LoRA plan to the directory `out` (Note [PEFT adapter export]).
// invalid_argument for a plan without LoRA, an `out` check_peft_export_out refuses or inside the
// checkpoint; no_space on a full disk; io_error for other read or write failures.
Result<PeftExportFiles> write_peft_adapter(const HfExportPlan& plan, const std::string& out,
                                           const CheckpointReadOptions& options = {});

}  // namespace strata
