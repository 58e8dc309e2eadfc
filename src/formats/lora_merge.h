// A LoRA checkpoint's adapters merged into its base weights, for `strata export --merge`.
//
// Note [Merged export]
// A LoRA checkpoint (Note [LoRA] in model/lora.h) holds the frozen base and, per targeted module
// of each block, A (r, in) and B (out, r). The merged model is the base with each targeted weight
// replaced by
//   W' = W + (alpha / r) B A                      (Strata's and Llama's (out, in) layout)
//   W'_hf = W_hf + (alpha / r) (B A)^T            (GPT-2's Conv1D, stored (in, out))
// and no adapter tensor: an ordinary Hugging Face model, whose logits equal the base's with the
// adapter applied unmerged (tools/torch_peft_check.py checks it). Each element's sum over the rank
// is taken in double, k = 0 .. r-1 in order, W + scale * sum in double too, and the result is
// rounded once to f32: deterministic, and within one rounding of the exact value. Every base
// tensor has at most one adapter (Llama's fused q|k|v and gate|up are separate HF tensors, one
// adapter each), so a merge holds one base matrix and its adapter.
#pragma once

#include <cstdint>
#include <vector>

#include "core/file_util.h"
#include "core/status.h"
#include "formats/safetensors.h"
#include "model/layout.h"

namespace strata {

// The adapter that adds into a base tensor: layout indices of its A and B; -1 for none.
struct LoraMergeSource {
  int64_t a = -1, b = -1;
  bool merges() const { return a >= 0; }
};

// By layout.tensors index: the adapter each base tensor merges (none for a layout without LoRA,
// for untargeted tensors and for the adapters themselves).
std::vector<LoraMergeSource> lora_merge_sources(const ParamLayout& layout);

// The scale of Note [LoRA]: alpha / r, in double.
double lora_scale(const LoraConfig& lora);

// w += scale * (B A) in place, rounded once per element (Note [Merged export]). w is the
// Hugging Face tensor: (out, in), or (in, out) when transposed (GPT-2's Conv1D). A (r, in),
// B (out, r).
void add_lora_delta(float* w, const float* A, const float* B, int64_t out, int64_t in, int64_t r,
                    double scale, bool transposed);

// The buffers of one merge: a base matrix and its adapter, in f32.
struct LoraMergeBuffers {
  std::vector<float> w, a, b;
  int64_t bytes() const {
    return static_cast<int64_t>((w.capacity() + a.capacity() + b.capacity()) * sizeof(float));
  }
};

// Base tensor `index` of `layout` with its adapter merged in, read from `src` at the offsets of
// `entries` (the checkpoint's tensors, in layout order, verified F32 of HF's shapes), into
// buf.w in Hugging Face's layout. Host memory: buf, one base matrix plus its A and B.
Status read_merged_tensor(const ReadOnlyFile& src, const std::vector<StEntry>& entries,
                          const ParamLayout& layout, int64_t index, const LoraMergeSource& source,
                          LoraMergeBuffers& buf);

}  // namespace strata
