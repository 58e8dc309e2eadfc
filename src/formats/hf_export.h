// A checkpoint's weights as a Hugging Face GPT-2 model: `strata export` (docs/design.md §8).
//
// Note [Streaming export]
// The checkpoint's model.safetensors already holds the weights under HF names and in HF layout
// (Note [Checkpoint format]), so an export is a copy of byte ranges, never the model in memory:
//   1. plan_hf_export verifies model.safetensors against the manifest (size and CRC32C, read in
//      chunks), reads its header and checks it against the checkpoint's config: every HF tensor
//      present, F32, of HF's shape, and nothing else.
//   2. write_hf_export copies each tensor from the checkpoint file into the output in chunks of
//      CheckpointReadOptions::chunk_bytes through one buffer, so host memory is one chunk
//      whatever the model's size.
// Where it goes: `out` is FILE.safetensors, or a directory (one that exists, or a path ending in
// '/'), which stands for DIR/model.safetensors. With FILE = DIR/BASE.safetensors:
//   - unsharded (the weights fit in shard_bytes, or shard_bytes is 0): DIR/BASE.safetensors;
//   - sharded: DIR/BASE-00001-of-0000N.safetensors ... and DIR/BASE.safetensors.index.json,
//     Hugging Face's layout: {"metadata": {"total_size": bytes of all tensors' data},
//     "weight_map": {tensor name: shard file name}}. Shards hold whole tensors in layout order,
//     filled up to shard_bytes of tensor data; a tensor larger than shard_bytes has a shard of
//     its own. (HF's loaders look for BASE = "model".)
// In both cases HF's config.json goes to DIR/config.json. Every file is written to a temporary
// name, fsynced and renamed (the index after all its shards, config.json last), so a crash never
// leaves a truncated file under a final name. Files of the other layout under the same names (a
// stale BASE.safetensors beside a new index, which loaders would prefer, or an old index and its
// shards beside a new single file) are removed once the new export is complete.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"

namespace strata {

// What an export copies: the verified model file of one checkpoint, its tensors in layout order.
struct HfExportPlan {
  std::string checkpoint;  // the step directory
  ModelConfig model;
  std::string weights_path;      // DIR/model.safetensors
  std::vector<StEntry> tensors;  // in layout order, checked against `model`
  int64_t parameter_count = 0;
};

// Verifies `checkpoint_dir`'s model.safetensors and checks its header against its config.json.
// Errors are one line naming the file (and the tensor): not_found, bad_format.
Result<HfExportPlan> plan_hf_export(const std::string& checkpoint_dir,
                                    const CheckpointReadOptions& options = {});

// Tensor indices grouped into shards, in order: each shard takes tensors while its data stays
// within shard_bytes; a tensor larger than that has a shard of its own. shard_bytes <= 0: one.
std::vector<std::vector<size_t>> group_into_shards(const std::vector<int64_t>& tensor_bytes,
                                                   int64_t shard_bytes);

struct HfExportFiles {
  std::vector<std::string> weights;  // the single file, or the shards in order
  std::string index;                 // the shard index; empty when unsharded
  std::string config;                // HF's config.json
  std::vector<std::string> removed;  // stale files of the other layout (Note [Streaming export])
};

// Writes the plan's tensors to `out` (Note [Streaming export]). invalid_argument when `out` is in
// the checkpoint or its directory cannot be made; no_space on a full disk; io_error for other
// read or write failures.
Result<HfExportFiles> write_hf_export(const HfExportPlan& plan, const std::string& out,
                                      int64_t shard_bytes,
                                      const CheckpointReadOptions& options = {});

}  // namespace strata
