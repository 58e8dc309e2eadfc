// strata export: a checkpoint's weights as a Hugging Face GPT-2 or Llama model (model.safetensors
// with HF names and layout, or shards and their index, plus HF's config.json beside them), for
// loading in other tools. A LoRA checkpoint gives its PEFT adapter (Note [PEFT adapter export] in
// formats/peft_export.h), or with --merge its merged model (Note [Merged export] in
// formats/lora_merge.h). The work is formats/hf_export.h's (Note [Streaming export]); host memory
// is one copy chunk whatever the model's size, plus one base matrix and its adapter to merge.
#include <filesystem>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/gathered_checkpoint.h"
#include "core/log.h"
#include "formats/checkpoint.h"
#include "formats/hf_export.h"
#include "formats/peft_export.h"

namespace strata::cli {

namespace {

std::string written_text(const HfExportFiles& files) {
  std::string text = files.index.empty() ? files.weights.front() + " and " + files.config
                                         : std::to_string(files.weights.size()) + " shards (" +
                                               files.weights.front() + " ...), " + files.index +
                                               " and " + files.config;
  if (!files.generation_config.empty()) text += ", " + files.generation_config;
  if (!files.tokenizer.empty()) {
    text += ", the base model's " + std::to_string(files.tokenizer.size()) + " tokenizer files";
  }
  return text;
}

const std::vector<FlagSpec> kExportFlags = {{"checkpoint", true, false},
                                            {"out", true, false},
                                            {"shard-size", true, false},
                                            {"merge", false, false}};

// Whether the export writes a PEFT adapter (choose_export), refused (2, one line) before
// anything is written.
Result<bool> export_adapter(const ParsedArgs& a, const std::string& dir) {
  STRATA_ASSIGN_OR_RETURN(TrainConfig cfg, read_checkpoint_config(dir));
  STRATA_ASSIGN_OR_RETURN(ExportKind kind,
                          choose_export(cfg, dir, a.has("merge"), a.has("shard-size")));
  const bool adapter = kind == ExportKind::adapter;
  STRATA_RETURN_IF_ERROR(adapter ? check_peft_export_out(a.get("out"))
                                 : check_hf_export_out(a.get("out")));
  return adapter;
}

int write_adapter(const HfExportPlan& plan, const std::string& out, const std::string& dir) {
  auto files = write_peft_adapter(plan, out);
  if (!files.ok())
    return fail(files.status().message(), exit_status_for(files.status(), Stage::running));
  log_info("exported the LoRA adapter of checkpoint " + dir + " (" +
           std::to_string(files->tensors) + " tensors, " + std::to_string(files->parameters) +
           " parameters) to " + files->weights + " and " + files->config);
  return 0;
}

int export_main(const ParsedArgs& a) {
  if (!a.has("checkpoint") || !a.has("out")) {
    return fail("strata export: --checkpoint DIR and --out FILE.safetensors are both required", 2);
  }
  int64_t shard_bytes = 0;  // one file
  if (a.has("shard-size")) {
    auto size = parse_byte_size("shard-size", a.get("shard-size"));
    if (!size.ok()) return fail(size.status().message(), 2);
    if (*size == 0) return fail("--shard-size must be positive", 2);
    shard_bytes = static_cast<int64_t>(*size);
  }
  // A run's checkpoint root stands for its newest complete step, as for resuming.
  auto dir = resolve_checkpoint(a.get("checkpoint"));
  if (!dir.ok()) return fail(dir.status().message(), 2);
  // Refused before anything is written, the gathered copy of a sharded checkpoint included.
  auto adapter = export_adapter(a, *dir);
  if (!adapter.ok())
    return fail(adapter.status().message(), exit_status_for(adapter.status(), Stage::before_work));

  // A sharded checkpoint is gathered first, beside the output.
  const std::filesystem::path out_path(a.get("out"));
  std::string out_dir =
      out_path.has_filename() && !*adapter ? out_path.parent_path().string() : out_path.string();
  if (out_dir.empty()) out_dir = ".";
  auto readable = HfReadableCheckpoint::open(*dir, out_dir);
  if (!readable.ok())
    return fail(readable.status().message(),
                exit_status_for(readable.status(), Stage::before_work));
  auto plan = plan_hf_export(readable->dir());
  if (!plan.ok()) return fail(plan.status().message(), 2);
  if (*adapter) return write_adapter(*plan, a.get("out"), *dir);
  auto files = write_hf_export(*plan, a.get("out"), shard_bytes);
  if (!files.ok())
    return fail(files.status().message(), exit_status_for(files.status(), Stage::running));
  for (const std::string& path : files->removed) {
    log_info("removed " + path + " of an earlier export to the same place");
  }
  log_info("exported " + std::to_string(files->parameters) + " parameters (" +
           std::to_string(files->tensors) + " tensors" +
           (plan->lora() ? ", the LoRA adapters merged in" : "") + ") of checkpoint " + *dir +
           " to " + written_text(*files));
  return 0;
}

}  // namespace

int cmd_export(const std::vector<std::string>& args) {
  return run_command(args, kExportFlags, "export", export_main);
}

}  // namespace strata::cli
