// A checkpoint's weights as a Hugging Face GPT-2 model: `strata export` (docs/design.md §8).
//
// Note [Streaming export]
// The checkpoint's model.safetensors already holds the weights in HF names and layout (Note
// [Checkpoint format]), so an export copies byte ranges and never holds the model:
//   1. plan_hf_export verifies the file against the manifest (size, CRC32C) and its header against
//      the config: every HF tensor present, F32, of HF's shape, and nothing else.
//   2. write_hf_export copies each tensor through one buffer of CheckpointReadOptions::chunk_bytes
//      (a LoRA checkpoint's targeted weights are merged instead, Note [Merged export]; its PEFT
//      adapter is formats/peft_export.h's).
// `out` is DIR/BASE.safetensors, or a directory (existing, or ending in '/') for BASE "model", the
// name HF's loaders look for. Sharded (data over shard_bytes > 0): BASE-00001-of-0000N.safetensors
// ..., whole tensors in layout order up to shard_bytes each (a larger one alone), and HF's index
// BASE.safetensors.index.json; config.json goes to DIR. Each file is an OutputFile (Note [Writing
// an output file]), all checked before the first byte (check_hf_export_out), then renamed in:
// the index after its shards, config.json last; the other layout's files are then removed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/file_util.h"
#include "core/status.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "model/layout.h"

namespace strata {

// What an export copies: the verified model file of one checkpoint, its tensors in layout order.
struct HfExportPlan {
  std::string checkpoint;  // the step directory
  ModelConfig model;
  ParamLayout layout;            // of the checkpoint's config: the model, and its LoRA adapters
  std::string weights_path;      // DIR/model.safetensors
  std::vector<StEntry> tensors;  // in layout order, checked against `model`
  int64_t parameter_count = 0;
  nlohmann::json base_model;  // Note [Base model] (formats/checkpoint.h): null when trained anew
  // Note [Checkpoint tokenizer]: the checkpoint's copy (tokenizer_copied), else the base's files.
  std::vector<std::string> tokenizer_files;
  bool tokenizer_copied = false;

  // A LoRA checkpoint (Note [LoRA]): a frozen base and adapters.
  bool lora() const { return layout.lora.enabled(); }
};

// Verifies `checkpoint_dir`'s model.safetensors and checks its header against its config.json.
// Errors are one line naming the file (and the tensor): not_found, bad_format.
Result<HfExportPlan> plan_hf_export(const std::string& checkpoint_dir,
                                    const CheckpointReadOptions& options = {});

// The export's config.json: Strata's for the model (hf_config_json_for) over, for an imported
// model (Note [Base model]), the imported config.json, so every field Strata does not set (special
// token ids, transformers_version, ...) comes back; its dropouts, initializer_range and
// torch_dtype are the imported ones too (Strata trains without them; the weights load in it).
nlohmann::json hf_export_config(const HfExportPlan& plan);
// The export's generation_config.json: the imported one, else one from the config's special
// token ids (HF's _from_model_config); null when there is neither.
nlohmann::json hf_export_generation_config(const HfExportPlan& plan, const nlohmann::json& config);

// The tokenizer files (tokenizer.json, tokenizer.model, tokenizer_config.json,
// special_tokens_map.json) still in the base's directory (Note [Base model]): a run copies them
// into its checkpoints (Note [Checkpoint tokenizer]). Empty for a model trained here or a base
// that moved.
std::vector<std::string> base_tokenizer_files(const nlohmann::json& base_model);
// The directory of tokenizer.json or tokenizer.model among `files` (load_tokenizer takes it and
// picks the file), else "".
std::string tokenizer_dir_of(const std::vector<std::string>& files);

// Tensor indices grouped into shards, in order: each shard takes tensors while its data stays
// within shard_bytes; a tensor larger than that has a shard of its own. shard_bytes <= 0: one.
std::vector<std::vector<size_t>> group_into_shards(const std::vector<int64_t>& tensor_bytes,
                                                   int64_t shard_bytes);

struct HfExportFiles {
  std::vector<std::string> weights;     // the single file, or the shards in order
  std::string index;                    // the shard index; empty when unsharded
  std::string config;                   // HF's config.json
  std::string generation_config;        // HF's generation_config.json; empty when none is known
  std::vector<std::string> tokenizer;   // the base's tokenizer files, copied
  std::vector<std::string> removed;     // stale files of the other layout (Note [Streaming export])
  int64_t tensors = 0, parameters = 0;  // written (a LoRA checkpoint's merged base)
};

// Writes the plan's tensors to `out` (Note [Streaming export]). invalid_argument when `out` is in
// the checkpoint or its directory cannot be made; no_space on a full disk; io_error for other
// read or write failures.
// Refuses (invalid_argument) an `out` whose directory exists and is not a directory, or whose
// weights, index or config.json path exists and is not a regular file (a link, a device, a FIFO).
// write_hf_export checks it first too; `strata export` also calls it before gathering anything.
Status check_hf_export_out(const std::string& out);

// A LoRA checkpoint's export is its merged model (Note [Merged export] in formats/lora_merge.h):
// the base tensors, each targeted weight with its adapter merged in; no adapter tensor. Host
// memory is then the copy chunk plus one base matrix and its adapter.
Result<HfExportFiles> write_hf_export(const HfExportPlan& plan, const std::string& out,
                                      int64_t shard_bytes,
                                      const CheckpointReadOptions& options = {});

// Pieces formats/peft_export.cpp shares. The export's directory `dir`, made if needed; refused
// (invalid_argument) when it cannot be made or is the checkpoint itself, whose files the export
// would overwrite.
Status prepare_export_dir(const std::string& dir, const std::string& out,
                          const std::string& checkpoint);
// A safetensors file at `path` (format "pt") holding `entries`, under their names, each copied
// from `src` at its offset through `chunk`.
Status write_copied_tensors(const ReadOnlyFile& src, const std::vector<StEntry>& entries,
                            const std::string& path, std::vector<uint8_t>& chunk);

}  // namespace strata
