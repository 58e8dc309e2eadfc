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
  void add(std::string name, Shape shape, bool decay) {
    cursor = round_up(cursor, kTensorAlignElems);
    ParamTensor t;
    t.name = std::move(name);
    t.offset = slab.offset + cursor;
    t.slab = static_cast<int64_t>(layout.slabs.size());
    t.decay = decay;
    t.shape = std::move(shape);
    const int64_t n = shape_elems(t.shape);
    cursor = add_elems(cursor, n);
    layout.parameter_count = add_elems(layout.parameter_count, n);
    layout.tensors.push_back(std::move(t));
  }
  void finish() {
    slab.numel = round_up(std::max<int64_t>(cursor, 1), kSlabAlignElems);
    slab.tensor_count = static_cast<int64_t>(layout.tensors.size()) - slab.first_tensor;
    layout.total_elems = add_elems(layout.total_elems, slab.numel);
    layout.slabs.push_back(slab);
  }
};

}  // namespace

ParamLayout make_param_layout(const ModelConfig& cfg) {
  const int64_t C = cfg.n_embd;
  ParamLayout layout;
  layout.config = cfg;

  SlabBuilder embed(layout, "embed");
  embed.add("wte.weight", {cfg.vocab_size, C}, true);
  embed.add("wpe.weight", {cfg.context_length, C}, true);
  embed.finish();

  for (int64_t l = 0; l < cfg.n_layer; l++) {
    const std::string p = "blk." + std::to_string(l) + ".";
    SlabBuilder blk(layout, "blk." + std::to_string(l));
    // Order must match enum BlockTensor.
    blk.add(p + "ln1.weight", {C}, false);
    blk.add(p + "ln1.bias", {C}, false);
    blk.add(p + "attn_qkv.weight", {3 * C, C}, true);
    blk.add(p + "attn_qkv.bias", {3 * C}, false);
    blk.add(p + "attn_proj.weight", {C, C}, true);
    blk.add(p + "attn_proj.bias", {C}, false);
    blk.add(p + "ln2.weight", {C}, false);
    blk.add(p + "ln2.bias", {C}, false);
    blk.add(p + "mlp_fc.weight", {4 * C, C}, true);
    blk.add(p + "mlp_fc.bias", {4 * C}, false);
    blk.add(p + "mlp_proj.weight", {C, 4 * C}, true);
    blk.add(p + "mlp_proj.bias", {C}, false);
    blk.finish();
  }

  SlabBuilder fin(layout, "final");
  fin.add("lnf.weight", {C}, false);
  fin.add("lnf.bias", {C}, false);
  fin.finish();
  return layout;
}

int64_t ParamLayout::find(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); i++) {
    if (tensors[i].name == name) return static_cast<int64_t>(i);
  }
  return -1;
}

// The views below read tensor t at base + t.offset - origin: origin 0 for a pointer to the whole
// parameter space, the slab's offset for a pointer to the slab alone.
namespace {
const ParamTensor* slab_tensors(const ParamLayout& layout, int64_t slab) {
  const Slab& s = layout.slabs[static_cast<size_t>(slab)];
  return &layout.tensors[static_cast<size_t>(s.first_tensor)];
}

EmbedView embed_view_from(const ParamLayout& layout, float* base, int64_t origin) {
  const ParamTensor* t = slab_tensors(layout, layout.embed_slab());
  return EmbedView{base + (t[0].offset - origin), base + (t[1].offset - origin)};
}

BlockView block_view_from(const ParamLayout& layout, float* base, int64_t layer, int64_t origin) {
  STRATA_CHECK(layer >= 0 && layer < layout.config.n_layer);
  const Slab& s = layout.slabs[static_cast<size_t>(layout.block_slab(layer))];
  STRATA_CHECK(s.tensor_count == kBlockTensorCount);
  const ParamTensor* t = slab_tensors(layout, layout.block_slab(layer));
  auto at = [&](BlockTensor k) { return base + (t[k].offset - origin); };
  return BlockView{at(kLn1Weight),      at(kLn1Bias),      at(kAttnQkvWeight), at(kAttnQkvBias),
                   at(kAttnProjWeight), at(kAttnProjBias), at(kLn2Weight),     at(kLn2Bias),
                   at(kMlpFcWeight),    at(kMlpFcBias),    at(kMlpProjWeight), at(kMlpProjBias)};
}

FinalView final_view_from(const ParamLayout& layout, float* base, int64_t origin) {
  const ParamTensor* t = slab_tensors(layout, layout.final_slab());
  return FinalView{base + (t[0].offset - origin), base + (t[1].offset - origin)};
}

int64_t slab_origin(const ParamLayout& layout, int64_t slab) {
  return layout.slabs[static_cast<size_t>(slab)].offset;
}
}  // namespace

EmbedView embed_view(const ParamLayout& layout, float* base) {
  return embed_view_from(layout, base, 0);
}
BlockView block_view(const ParamLayout& layout, float* base, int64_t layer) {
  return block_view_from(layout, base, layer, 0);
}
FinalView final_view(const ParamLayout& layout, float* base) {
  return final_view_from(layout, base, 0);
}

EmbedView embed_slab_view(const ParamLayout& layout, float* slab_base) {
  return embed_view_from(layout, slab_base, slab_origin(layout, layout.embed_slab()));
}
BlockView block_slab_view(const ParamLayout& layout, float* slab_base, int64_t layer) {
  return block_view_from(layout, slab_base, layer, slab_origin(layout, layout.block_slab(layer)));
}
FinalView final_slab_view(const ParamLayout& layout, float* slab_base) {
  return final_view_from(layout, slab_base, slab_origin(layout, layout.final_slab()));
}

}  // namespace strata
