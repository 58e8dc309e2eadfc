// A Hugging Face model's weights as the starting point of training: `strata train --init-from
// DIR` (docs/design.md §8).
//
// Note [Hugging Face import]
// DIR is what save_pretrained writes: config.json, and DIR/model.safetensors or shards listed in
// DIR/model.safetensors.index.json ({"weight_map": {tensor: shard}}; with both, the single file).
//   1. plan_hf_import reads config.json (model/hf_config.h) and only the safetensors headers, and
//      checks all before a weight is read or trainer state changes: each indexed shard exists and
//      holds exactly its indexed tensors; each tensor of Strata's layout is there under its HF name
//      (model/hf_names.h), of HF's shape, F32, BF16 or F16; nothing else but what HF's loader
//      ignores (GPT-2's attn.bias/masked_bias, Llama's rotary inv_freq, a tied model's lm_head of
//      wte's shape; GPT-2's "transformer." prefix, never both spellings); all data inside its file.
//   2. import_hf_weights fills each slab via Trainer::write_slab_pieces (Note [Slab pieces]):
//      masters widened exactly (Note [Widening to f32]), padding and moments zero. Host memory
//      beside the trainer's is one chunk_bytes buffer and at most two tensors (Conv1D scratch).
#pragma once

#include <cstdint>
#include <memory>
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
// Errors are bad_format or not_found, one line naming the file and the tensor or field.
Result<HfImportPlan> plan_hf_import(const std::string& dir);

struct HfImportOptions {
  int64_t chunk_bytes = int64_t{16} << 20;  // the read buffer of BF16 and F16 data
  uint64_t seed = 0;  // a LoRA layout's adapters start from it (Note [LoRA] in model/lora.h)
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

// The slabs of an imported model's layout (make_param_layout(plan.model)) one at a time, in any
// order, as f32 (padding zero): `strata sample --model DIR`. Holds the plan's open files, the
// read buffers of import_hf_weights and two slabs' worth of scratch.
class HfSlabReader {
 public:
  static Result<HfSlabReader> open(const HfImportPlan& plan);
  ~HfSlabReader();
  HfSlabReader(HfSlabReader&&) noexcept;
  // Slab `slab` into dst (its numel floats); io_error or bad_format naming the file.
  Status read(int64_t slab, float* dst);

 private:
  struct Impl;
  explicit HfSlabReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
