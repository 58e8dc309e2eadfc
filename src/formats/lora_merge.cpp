// Merging LoRA adapters into the base; Note [Merged export] in formats/lora_merge.h.
#include "formats/lora_merge.h"

#include <iterator>

#include "core/check.h"

namespace strata {

namespace {

// The base tensor (its index in a block's slab) that adapter slot `slot` adds into: the HF
// module's own weight (model/lora.h's lora_modules order).
int64_t lora_base_tensor(ModelArch arch, int slot) {
  static constexpr int64_t kGpt2[] = {kAttnQkvWeight, kAttnProjWeight, kMlpFcWeight,
                                      kMlpProjWeight};
  static constexpr int64_t kLlama[] = {kAttnQWeight,   kAttnKWeight, kAttnVWeight,  kAttnOutWeight,
                                       kMlpGateWeight, kMlpUpWeight, kMlpDownWeight};
  if (arch == ModelArch::llama) {
    STRATA_CHECK(slot >= 0 && slot < static_cast<int>(std::size(kLlama)));
    return kLlama[slot];
  }
  STRATA_CHECK(slot >= 0 && slot < static_cast<int>(std::size(kGpt2)));
  return kGpt2[slot];
}

Status read_floats(const ReadOnlyFile& src, const StEntry& e, std::vector<float>& out) {
  STRATA_CHECK(e.dtype == StDType::f32);
  out.resize(static_cast<size_t>(e.numel()));
  return src.read_at(out.data(), e.bytes, e.offset);
}

}  // namespace

std::vector<LoraMergeSource> lora_merge_sources(const ParamLayout& layout) {
  std::vector<LoraMergeSource> sources(layout.tensors.size());
  for (int64_t l = 0; l < layout.config.n_layer; ++l) {
    const Slab& s = layout.slabs[static_cast<size_t>(layout.block_slab(l))];
    for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
      const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
      if (t.lora_slot < 0) continue;
      const int64_t base = s.first_tensor + lora_base_tensor(layout.config.arch, t.lora_slot);
      const ParamTensor& w = layout.tensors[static_cast<size_t>(base)];
      const LoraGeometry g = lora_geometry(layout.config, t.lora_slot);
      // Each adapter covers all of its base tensor's rows (Llama's parts are tensors of their
      // own), so the merge needs no row offset.
      STRATA_CHECK_MSG(w.shape.dims == (std::vector<int64_t>{g.out, g.in}),
                       ("LoRA adapter " + t.name + " does not fit " + w.name).c_str());
      LoraMergeSource& src = sources[static_cast<size_t>(base)];
      (t.lora_b ? src.b : src.a) = i;
    }
  }
  return sources;
}

double lora_scale(const LoraConfig& lora) {
  STRATA_CHECK(lora.rank > 0);
  return static_cast<double>(lora.alpha) / static_cast<double>(lora.rank);
}

void add_lora_delta(float* w, const float* A, const float* B, int64_t out, int64_t in, int64_t r,
                    double scale, bool transposed) {
  for (int64_t i = 0; i < out; ++i) {
    const float* b_row = B + i * r;  // (r)
    for (int64_t j = 0; j < in; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < r; ++k) {
        sum += static_cast<double>(b_row[k]) * static_cast<double>(A[k * in + j]);
      }
      float& dst = transposed ? w[j * out + i] : w[i * in + j];
      dst = static_cast<float>(static_cast<double>(dst) + scale * sum);
    }
  }
}

Status read_merged_tensor(const ReadOnlyFile& src, const std::vector<StEntry>& entries,
                          const ParamLayout& layout, int64_t index, const LoraMergeSource& source,
                          LoraMergeBuffers& buf) {
  STRATA_CHECK(source.a >= 0 && source.b >= 0);
  const ParamTensor& t = layout.tensors[static_cast<size_t>(index)];
  STRATA_RETURN_IF_ERROR(read_floats(src, entries[static_cast<size_t>(index)], buf.w));
  STRATA_RETURN_IF_ERROR(read_floats(src, entries[static_cast<size_t>(source.a)], buf.a));
  STRATA_RETURN_IF_ERROR(read_floats(src, entries[static_cast<size_t>(source.b)], buf.b));
  const int64_t out = t.shape.dims[0], in = t.shape.dims[1];
  add_lora_delta(buf.w.data(), buf.a.data(), buf.b.data(), out, in, layout.lora.rank,
                 lora_scale(layout.lora), t.hf_transposed);
  return Status();
}

}  // namespace strata
