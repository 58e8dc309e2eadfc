// A Hugging Face model's weights as the starting point of training: `strata train --init-from
// DIR` (docs/design.md §8).
//
// Note [Hugging Face import]
// DIR is what save_pretrained writes (and `strata export`): config.json, and the weights in
// DIR/model.safetensors or in shards listed by DIR/model.safetensors.index.json ({"weight_map":
// {tensor: shard file}}; when both exist the single file is read, as HF's loader does).
//   1. plan_hf_import reads config.json (model/hf_config.h: the model, or one line naming the
//      field Strata cannot train) and only the safetensors headers, and checks everything before
//      any weight is read or any trainer state changes:
//        - every shard the index names exists (not_found naming the index and the file), every
//          tensor is where the index says, and no shard holds a tensor the index does not list;
//        - every tensor of Strata's layout for that model is present under its HF name
//          (model/hf_names.h) with HF's shape and a float dtype: F32, BF16 or F16 (widened
//          exactly, formats/safetensors_f32.h);
//        - nothing else is there but what HF's own loader ignores: GPT-2's attention mask
//          buffers h.{l}.attn.bias and h.{l}.attn.masked_bias, Llama's rotary buffers
//          model.layers.{l}.self_attn.rotary_emb.inv_freq, and in a tied model an
//          lm_head.weight of the embedding's shape (HF ties it to the embedding on load, so its
//          values are not read). GPT-2 names may carry GPT2LMHeadModel's "transformer." prefix;
//          a tensor present under both spellings is refused;
//        - every tensor's data lies inside its file (read_safetensors_header: a truncated shard
//          is one line naming the file, the tensor and the sizes).
//      Errors are bad_format or not_found, one line naming the file and the tensor or field.
//   2. import_hf_weights hands every slab to the trainer's slab writer (Trainer::
//      write_slab_pieces), which has it fill the slab piece by piece (Note [Slab pieces]): the
//      master weights from the files, widened to f32 and laid out by from_hf_layout (padding
//      zero), and AdamW's moments zero, so the optimizer starts fresh. Reads go through one
//      buffer of at most chunk_bytes (F32 data is read straight into the piece), and a GPT-2
//      Conv1D weight, the only tensor HF transposes, through one tensor of scratch, plus one more
//      kept while piece boundaries cut it. So host memory beside the trainer's own is one chunk
//      and at most two tensors: never a slab, never the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "model/layout.h"

namespace strata {

// Where one tensor of Strata's layout is read from.
struct HfImportSource {
  size_t file = 0;  // index into HfImportPlan::files
  StEntry entry;    // its header entry (the name as the file spells it)
};

struct HfImportPlan {
  std::string dir;
  std::string config_path;              // DIR/config.json
  ModelConfig model;                    // from config.json, in hf_canonical form
  std::string index;                    // DIR/model.safetensors.index.json when sharded, else empty
  std::vector<std::string> files;       // the weight files: the single file or the shards
  std::vector<HfImportSource> tensors;  // one per tensor of make_param_layout(model), in order
  std::vector<std::string> ignored;     // tensors read past (Note [Hugging Face import])
  int64_t parameter_count = 0;
  int64_t data_bytes = 0;  // bytes of the tensors the import reads
  std::string dtypes;      // the imported tensors' dtypes, "BF16" or "F32 and F16": for the log
};

// Checks DIR (Note [Hugging Face import]) and says where each tensor lies; reads no weights.
Result<HfImportPlan> plan_hf_import(const std::string& dir);

struct HfImportOptions {
  int64_t chunk_bytes = int64_t{16} << 20;  // the read buffer of BF16 and F16 data
};

struct HfImportStats {
  int64_t tensors = 0;
  int64_t parameters = 0;
  int64_t bytes_read = 0;
  int64_t buffer_bytes = 0;  // the most bytes of read and conversion buffers held at once
  double seconds = 0;
};

// Fills every slab of `layout` (the trainer's: it must be make_param_layout(plan.model)) through
// `write_slab` (Note [Hugging Face import]). io_error for a failed read, bad_format for a file
// that changed since the plan (it ends early); internal when the pieces do not cover a slab in
// order.
Result<HfImportStats> import_hf_weights(const HfImportPlan& plan, const ParamLayout& layout,
                                        const SlabWriter& write_slab,
                                        const HfImportOptions& options = {});

}  // namespace strata
