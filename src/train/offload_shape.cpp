#include "train/offload_shape.h"

#include <algorithm>

#include "train/offload_spec.h"

namespace strata {

OffloadShape make_offload_shape(const Device& dev, const TrainConfig& cfg, int rank, int ranks) {
  OffloadShape sh;
  sh.cfg = cfg;
  sh.layout = make_param_layout(cfg.model, cfg.lora);
  sh.dims = block_dims(dev, cfg.model, cfg.batch_size, cfg.seq_len, nullptr, cfg.lora);
  sh.vertical = cfg.schedule == Schedule::vertical;
  sh.bf16 = cfg.precision == Precision::bf16;
  sh.block_elems = sh.layout.slabs[static_cast<size_t>(sh.layout.block_slab(0))].numel;
  sh.frozen_elems = frozen_elems_for(cfg, sh.layout);
  sh.split_elems = split_elems_for(cfg, sh.block_elems, sh.frozen_elems);
  sh.embed_elems = embed_group_elems(sh.layout);
  sh.embed_slab_elems = sh.layout.slabs[static_cast<size_t>(sh.layout.embed_slab())].numel;
  sh.speculative = sh.vertical && sh.has_part0() && cfg.optim.grad_clip > 0;
  // Note [Optimizer stage size]: the plans' chunks, so the step tasks' `part` means the same here.
  sh.shard_spec = offload_schedule_spec(dev, cfg, false, true);
  sh.shard_spec.rank = rank;
  sh.embed_chunk_elems = embed_chunk_elems_for(sh.shard_spec);
  sh.rank = rank;
  sh.ranks = ranks;
  return sh;
}

std::pair<int64_t, int64_t> OffloadShape::embed_chunk_range(int32_t chunk) const {
  if (chunk < 0) return {0, embed_elems};
  const int64_t lo = chunk * embed_chunk_elems;
  return {lo, std::min(embed_elems, lo + embed_chunk_elems)};
}

OffloadShape::ParamsPart OffloadShape::params_part(int32_t part) const {
  const PartShard sh = owned_part(part);
  const int64_t width = bf16 ? 2 : 4;  // Note [Precision modes]
  return {sh.part_begin * width, sh.part_end - sh.part_begin, width};
}

}  // namespace strata
