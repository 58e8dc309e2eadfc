#include "model/layout.h"

#include <optional>

#include "core/check.h"
#include "core/math_util.h"

namespace strata {

namespace {

// Sizes are summed in checked arithmetic. parse_config bounds the model so that no sum can leave
// int64 (Note [Config bounds] in core/config_bounds.h): one that does is a bug, not input.
int64_t add_elems(int64_t a, int64_t b) {
  const auto r = checked_add(a, b);
  STRATA_CHECK_MSG(r.has_value(), "parameter layout overflows int64 (Note [Config bounds])");
  return *r;
}

int64_t shape_elems(const Shape& shape) {
  std::optional<int64_t> n = 1;
  for (int64_t d : shape.dims) {
    STRATA_CHECK_MSG(d >= 0, "parameter layout: negative dimension");
    if (n) n = checked_mul(*n, d);
  }
  STRATA_CHECK_MSG(n.has_value(), "parameter layout overflows int64 (Note [Config bounds])");
  return *n;
}

// Appends tensors to the layout as one slab.
struct SlabBuilder {
  ParamLayout& layout;
  Slab slab;
  int64_t cursor = 0;  // elements from slab start

  SlabBuilder(ParamLayout& l, std::string name) : layout(l) {
    slab.name = std::move(name);
    slab.offset = l.total_elems;
    slab.first_tensor = static_cast<int64_t>(l.tensors.size());
  }
  // packed: no alignment before this tensor, so it continues the one before in memory (the
  // rows of a fused matrix, Note [Llama blocks]).
  void add(std::string name, Shape shape, ParamInit init, std::string hf_name,
           bool hf_transposed = false, bool packed = false) {
    add_tensor(std::move(name), std::move(shape), init, std::move(hf_name), hf_transposed, packed);
  }
  ParamTensor& add_tensor(std::string name, Shape shape, ParamInit init, std::string hf_name,
                          bool hf_transposed, bool packed) {
    if (!packed) cursor = round_up(cursor, kTensorAlignElems);
    ParamTensor t;
    t.name = std::move(name);
    t.offset = slab.offset + cursor;
    t.slab = static_cast<int64_t>(layout.slabs.size());
    // Matrices and embeddings decay; biases and norm gains do not.
    t.decay = shape.rank() == 2;
    t.init = init;
    t.hf_name = std::move(hf_name);
    t.hf_transposed = hf_transposed;
    t.shape = std::move(shape);
    const int64_t n = shape_elems(t.shape);
    cursor = add_elems(cursor, n);
    layout.parameter_count = add_elems(layout.parameter_count, n);
    layout.tensors.push_back(std::move(t));
    return layout.tensors.back();
  }
  void finish() {
    slab.numel = round_up(std::max<int64_t>(cursor, 1), kSlabAlignElems);
    slab.tensor_count = static_cast<int64_t>(layout.tensors.size()) - slab.first_tensor;
    layout.total_elems = add_elems(layout.total_elems, slab.numel);
    layout.slabs.push_back(slab);
  }
};

// Block l's adapters (Note [LoRA]), slot by slot after its base tensors: "blk.3.self_attn.q_proj.
// lora_A" (r, in) and ".lora_B" (out, r), named as PEFT's adapter files name them. hf_layer is the
// layer's module prefix in PEFT's names ("model.layers.3.", "transformer.h.3.").
void add_lora_tensors(SlabBuilder& blk, const ParamLayout& layout, int64_t l,
                      const std::string& hf_layer) {
  if (!layout.lora.enabled()) return;
  const auto& mods = lora_modules(layout.config.arch);
  const int64_t r = layout.lora.rank;
  for (size_t s = 0; s < mods.size(); s++) {
    if (!layout.lora_on[s]) continue;
    const LoraGeometry g = lora_geometry(layout.config, static_cast<int>(s));
    const std::string name = "blk." + std::to_string(l) + "." + mods[s].hf_path + ".lora_";
    const std::string hf = "base_model.model." + hf_layer + mods[s].hf_path + ".lora_";
    ParamTensor& a = blk.add_tensor(name + "A", {r, g.in}, ParamInit::kaiming_uniform,
                                    hf + "A.weight", false, false);
    a.lora_slot = static_cast<int8_t>(s);
    ParamTensor& b =
        blk.add_tensor(name + "B", {g.out, r}, ParamInit::zeros, hf + "B.weight", false, false);
    b.lora_slot = static_cast<int8_t>(s);
    b.lora_b = true;
  }
}

// Seed indices, and (Note [LoRA]) every base tensor frozen but those modules_to_save trains.
void freeze_base(ParamLayout& layout) {
  uint64_t base = 0, adapters = 0;
  for (ParamTensor& t : layout.tensors) {
    t.seed_index = t.lora_slot >= 0 ? (uint64_t{1} << 32) + adapters++ : base++;
  }
  layout.trainable_count = layout.parameter_count;
  if (!layout.lora.enabled()) return;
  const LoraSaved saved = lora_saved(layout.config, layout.lora);
  for (ParamTensor& t : layout.tensors) {
    const bool trained = t.lora_slot >= 0 || (t.name == "wte.weight" && saved.wte) ||
                         (t.name == "lm_head.weight" && saved.lm_head);
    t.frozen = !trained;
    if (t.frozen) layout.trainable_count -= t.numel();
  }
}

}  // namespace

namespace {

// Note [Hugging Face GPT-2 layout] in model/hf_names.h: Conv1D weights are stored transposed.
void add_gpt2_slabs(ParamLayout& layout, const ModelConfig& cfg) {
  const int64_t C = cfg.n_embd;
  using I = ParamInit;
  SlabBuilder embed(layout, "embed");
  embed.add("wte.weight", {cfg.vocab_size, C}, I::normal, "wte.weight");
  embed.add("wpe.weight", {cfg.context_length, C}, I::normal, "wpe.weight");
  embed.finish();

  for (int64_t l = 0; l < cfg.n_layer; l++) {
    const std::string p = "blk." + std::to_string(l) + ".", h = "h." + std::to_string(l) + ".";
    SlabBuilder blk(layout, "blk." + std::to_string(l));
    // Order must match enum BlockTensor.
    blk.add(p + "ln1.weight", {C}, I::ones, h + "ln_1.weight");
    blk.add(p + "ln1.bias", {C}, I::zeros, h + "ln_1.bias");
    blk.add(p + "attn_qkv.weight", {3 * C, C}, I::normal, h + "attn.c_attn.weight", true);
    blk.add(p + "attn_qkv.bias", {3 * C}, I::zeros, h + "attn.c_attn.bias");
    blk.add(p + "attn_proj.weight", {C, C}, I::residual_normal, h + "attn.c_proj.weight", true);
    blk.add(p + "attn_proj.bias", {C}, I::zeros, h + "attn.c_proj.bias");
    blk.add(p + "ln2.weight", {C}, I::ones, h + "ln_2.weight");
    blk.add(p + "ln2.bias", {C}, I::zeros, h + "ln_2.bias");
    blk.add(p + "mlp_fc.weight", {4 * C, C}, I::normal, h + "mlp.c_fc.weight", true);
    blk.add(p + "mlp_fc.bias", {4 * C}, I::zeros, h + "mlp.c_fc.bias");
    blk.add(p + "mlp_proj.weight", {C, 4 * C}, I::residual_normal, h + "mlp.c_proj.weight", true);
    blk.add(p + "mlp_proj.bias", {C}, I::zeros, h + "mlp.c_proj.bias");
    add_lora_tensors(blk, layout, l, "transformer." + h);
    blk.finish();
  }

  SlabBuilder fin(layout, "final");
  fin.add("lnf.weight", {C}, I::ones, "ln_f.weight");
  fin.add("lnf.bias", {C}, I::zeros, "ln_f.bias");
  fin.finish();
}

// Hugging Face's LlamaForCausalLM names; its Linear weights are (out, in) as Strata's.
// Initialisation as HF's: every matrix N(0, 0.02), norm gains 1.
void add_llama_slabs(ParamLayout& layout, const ModelConfig& cfg) {
  const int64_t C = cfg.n_embd, Ckv = cfg.kv_width(), F = cfg.ffn();
  using I = ParamInit;
  SlabBuilder embed(layout, "embed");
  embed.add("wte.weight", {cfg.vocab_size, C}, I::normal, "model.embed_tokens.weight");
  embed.finish();

  for (int64_t l = 0; l < cfg.n_layer; l++) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const std::string h = "model.layers." + std::to_string(l) + ".";
    SlabBuilder blk(layout, "blk." + std::to_string(l));
    // Order must match enum LlamaBlockTensor.
    blk.add(p + "attn_norm.weight", {C}, I::ones, h + "input_layernorm.weight");
    blk.add(p + "attn_q.weight", {C, C}, I::normal, h + "self_attn.q_proj.weight");
    blk.add(p + "attn_k.weight", {Ckv, C}, I::normal, h + "self_attn.k_proj.weight", false, true);
    blk.add(p + "attn_v.weight", {Ckv, C}, I::normal, h + "self_attn.v_proj.weight", false, true);
    blk.add(p + "attn_out.weight", {C, C}, I::normal, h + "self_attn.o_proj.weight");
    blk.add(p + "mlp_norm.weight", {C}, I::ones, h + "post_attention_layernorm.weight");
    blk.add(p + "mlp_gate.weight", {F, C}, I::normal, h + "mlp.gate_proj.weight");
    blk.add(p + "mlp_up.weight", {F, C}, I::normal, h + "mlp.up_proj.weight", false, true);
    blk.add(p + "mlp_down.weight", {C, F}, I::normal, h + "mlp.down_proj.weight");
    add_lora_tensors(blk, layout, l, h);
    blk.finish();
  }

  SlabBuilder fin(layout, "final");
  fin.add("norm.weight", {C}, I::ones, "model.norm.weight");
  if (!cfg.tie_embeddings) {
    fin.add("lm_head.weight", {cfg.vocab_size, C}, I::normal, "lm_head.weight");
  }
  fin.finish();
}

}  // namespace

ParamLayout make_param_layout(const ModelConfig& cfg, const LoraConfig& lora) {
  ParamLayout layout;
  layout.config = cfg;
  if (lora.enabled()) {
    layout.lora = lora;
    layout.lora_on = lora_targeted(cfg, lora);
  }
  switch (cfg.arch) {
    case ModelArch::gpt2:
      add_gpt2_slabs(layout, cfg);
      break;
    case ModelArch::llama:
      add_llama_slabs(layout, cfg);
      break;
  }
  freeze_base(layout);
  return layout;
}

int64_t ParamLayout::find(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); i++) {
    if (tensors[i].name == name) return static_cast<int64_t>(i);
  }
  return -1;
}

// The views below read tensor t at base + t.offset - origin: origin 0 for a pointer to the whole
// parameter space, the slab's offset for a pointer to the slab alone. A gradient view has null
// for a frozen tensor (Note [LoRA]).
namespace {
struct Where {
  float* base;
  int64_t origin;
  ViewOf of;
  float* at(const ParamTensor& t) const {
    if (of == ViewOf::grads && t.frozen) return nullptr;
    return base + (t.offset - origin);
  }
};

const ParamTensor* slab_tensors(const ParamLayout& layout, int64_t slab) {
  const Slab& s = layout.slabs[static_cast<size_t>(slab)];
  return &layout.tensors[static_cast<size_t>(s.first_tensor)];
}

EmbedView embed_view_from(const ParamLayout& layout, const Where& w) {
  const Slab& s = layout.slabs[static_cast<size_t>(layout.embed_slab())];
  const ParamTensor* t = slab_tensors(layout, layout.embed_slab());
  return EmbedView{w.at(t[0]), s.tensor_count > 1 ? w.at(t[1]) : nullptr};
}

BlockView gpt2_block_view(const ParamTensor* t, const Where& w) {
  auto at = [&](BlockTensor k) { return w.at(t[k]); };
  return BlockView{at(kLn1Weight),
                   at(kLn1Bias),
                   at(kAttnQkvWeight),
                   at(kAttnQkvBias),
                   at(kAttnProjWeight),
                   at(kAttnProjBias),
                   at(kLn2Weight),
                   at(kLn2Bias),
                   at(kMlpFcWeight),
                   at(kMlpFcBias),
                   at(kMlpProjWeight),
                   at(kMlpProjBias),
                   {}};
}

BlockView llama_block_view(const ParamTensor* t, const Where& w) {
  auto at = [&](LlamaBlockTensor k) { return w.at(t[k]); };
  return BlockView{at(kAttnNormWeight),
                   nullptr,
                   at(kAttnQWeight),
                   nullptr,
                   at(kAttnOutWeight),
                   nullptr,
                   at(kMlpNormWeight),
                   nullptr,
                   at(kMlpGateWeight),
                   nullptr,
                   at(kMlpDownWeight),
                   nullptr,
                   {}};
}

// The adapters after a block's base tensors (Note [LoRA]), by slot.
void add_lora_view(BlockView& v, const ParamTensor* t, int64_t first, int64_t count,
                   const Where& w) {
  for (int64_t i = first; i < count; i++) {
    const ParamTensor& a = t[i];
    STRATA_CHECK(a.lora_slot >= 0 && a.lora_slot < kLoraSlots);
    LoraPair& pair = v.lora[static_cast<size_t>(a.lora_slot)];
    (a.lora_b ? pair.B : pair.A) = w.at(a);
  }
}

BlockView block_view_from(const ParamLayout& layout, int64_t layer, const Where& w) {
  STRATA_CHECK(layer >= 0 && layer < layout.config.n_layer);
  const Slab& s = layout.slabs[static_cast<size_t>(layout.block_slab(layer))];
  const ParamTensor* t = slab_tensors(layout, layout.block_slab(layer));
  const bool llama = layout.config.arch == ModelArch::llama;
  const int64_t base_count = llama ? int64_t{kLlamaBlockTensorCount} : int64_t{kBlockTensorCount};
  STRATA_CHECK(s.tensor_count >= base_count);
  BlockView v = llama ? llama_block_view(t, w) : gpt2_block_view(t, w);
  add_lora_view(v, t, base_count, s.tensor_count, w);
  return v;
}

// GPT-2: lnf.weight, lnf.bias. Llama: norm.weight [, lm_head.weight].
FinalView final_view_from(const ParamLayout& layout, const Where& w) {
  const Slab& s = layout.slabs[static_cast<size_t>(layout.final_slab())];
  const ParamTensor* t = slab_tensors(layout, layout.final_slab());
  if (layout.config.arch == ModelArch::gpt2) return FinalView{w.at(t[0]), w.at(t[1]), nullptr};
  return FinalView{w.at(t[0]), nullptr, s.tensor_count > 1 ? w.at(t[1]) : nullptr};
}

int64_t slab_origin(const ParamLayout& layout, int64_t slab) {
  return layout.slabs[static_cast<size_t>(slab)].offset;
}
}  // namespace

EmbedView embed_view(const ParamLayout& layout, float* base, ViewOf of) {
  return embed_view_from(layout, {base, 0, of});
}
BlockView block_view(const ParamLayout& layout, float* base, int64_t layer, ViewOf of) {
  return block_view_from(layout, layer, {base, 0, of});
}
FinalView final_view(const ParamLayout& layout, float* base, ViewOf of) {
  return final_view_from(layout, {base, 0, of});
}

EmbedView embed_slab_view(const ParamLayout& layout, float* slab_base, ViewOf of) {
  return embed_view_from(layout, {slab_base, slab_origin(layout, layout.embed_slab()), of});
}
BlockView block_slab_view(const ParamLayout& layout, float* slab_base, int64_t layer, ViewOf of) {
  return block_view_from(layout, layer,
                         {slab_base, slab_origin(layout, layout.block_slab(layer)), of});
}
BlockView block_slab_grad_view(const ParamLayout& layout, float* grads, int64_t layer,
                               int64_t first) {
  return block_view_from(
      layout, layer, {grads, slab_origin(layout, layout.block_slab(layer)) + first, ViewOf::grads});
}
FinalView final_slab_view(const ParamLayout& layout, float* slab_base, ViewOf of) {
  return final_view_from(layout, {slab_base, slab_origin(layout, layout.final_slab()), of});
}

}  // namespace strata
