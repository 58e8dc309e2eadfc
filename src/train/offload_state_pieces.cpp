// OffloadState (train/offload_state.h): the training state in slab pieces (Note [Slab pieces])
// for checkpoints and read_params, and the embed group's state wherever it lives.
#include <algorithm>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "core/dtype.h"
#include "sched/slot_names.h"
#include "train/offload_state.h"

namespace strata {

namespace names = slot_names;

Status OffloadState::embed_state_io(IoOp op, int64_t at, float* data, int64_t elems) {
  SlotMemory& sm = *memory_.at(names::kEmbedOptim);
  if (sm.tier != Tier::storage) {
    float* st = sm.buf.f32() + at;
    if (op == IoOp::read) {
      std::memcpy(data, st, static_cast<size_t>(elems * 4));
    } else {
      std::memcpy(st, data, static_cast<size_t>(elems * 4));
    }
    return Status::ok_status();
  }
  // Through an aligned stage, a block's worth at a time: `data` need not suit O_DIRECT.
  float* stage = idle_block_stage();
  for (int64_t i = 0; i < elems; i += sh_.block_elems) {
    const int64_t k = std::min(sh_.block_elems, elems - i);
    if (op == IoOp::write) std::memcpy(stage, data + i, static_cast<size_t>(k * 4));
    STRATA_RETURN_IF_ERROR(store_io(sm, op, (at + i) * 4, stage, k * 4));
    if (op == IoOp::read) std::memcpy(data + i, stage, static_cast<size_t>(k * 4));
  }
  return Status::ok_status();
}

Status OffloadState::read_params(float* host) {
  for (int64_t l = 0; l < sh_.cfg.model.n_layer; ++l) {
    const Slab& s = sh_.layout.slabs[static_cast<size_t>(sh_.layout.block_slab(l))];
    STRATA_RETURN_IF_ERROR(read_block_params(l, host + s.offset));
  }
  // The embed group's working params are its master weights (the first E elements of its
  // state; bf16 mode: rounded).
  const Slab& e = sh_.layout.slabs[static_cast<size_t>(sh_.layout.embed_slab())];
  const Slab& f = sh_.layout.slabs[static_cast<size_t>(sh_.layout.final_slab())];
  STRATA_RETURN_IF_ERROR(embed_state_io(IoOp::read, 0, host + e.offset, e.numel));
  STRATA_RETURN_IF_ERROR(embed_state_io(IoOp::read, e.numel, host + f.offset, f.numel));
  if (sh_.bf16) {
    for (const Slab* g : {&e, &f}) {
      round_to_bf16(host + g->offset, host + g->offset, g->numel);
    }
  }
  return Status::ok_status();
}

std::vector<std::pair<std::string, int32_t>> OffloadState::optim_parts(int64_t block) const {
  std::vector<std::pair<std::string, int32_t>> out;
  for (int32_t part : {-1, 0, 1}) {
    std::string name = names::optim_store(block, part);
    if (memory_.count(name) != 0) out.emplace_back(std::move(name), part);
  }
  return out;
}

float* OffloadState::optim_stage0() {
  auto it = memory_.find(names::kOptimStage.at(0));
  return it == memory_.end() ? nullptr : it->second->buf.f32();
}

Status OffloadState::state_pieces(int64_t slab, float* stage, const SlabPieceFn& take,
                                  Shards shards, Range within) {
  if (slab == sh_.layout.embed_slab() || slab == sh_.layout.final_slab()) {
    return embed_slab_pieces(IoOp::read, slab, stage, take, within);
  }
  const int64_t block = slab - sh_.layout.block_slab(0);
  STRATA_RETURN_IF_ERROR(frozen_pieces(block, IoOp::read, take));
  for (const auto& [name, part] : optim_parts(block)) {
    SlotMemory& sm = *memory_.at(name);
    const PartShard own = sh_.owned_part(part);
    const int64_t S = own.stride;
    float* st = sm.buf.f32();  // (3, S) master, m, v of this rank's shard of the part
    if (sm.tier == Tier::storage) {
      st = stage;
      STRATA_RETURN_IF_ERROR(store_io(sm, IoOp::read, 0, st, S * 12));
    }
    // Note [Sharded optimizer state]: every rank's shard, in rank order (so in element order),
    // broadcast by its owner; one rank: its own, the whole part.
    for (int r = 0; r < world_.size(); ++r) {
      if (shards == Shards::own_only && r != world_.rank()) continue;
      const PartShard sh = sh_.rank_shard(part, r);
      float* piece = st;  // (3, S)
      if (r != world_.rank()) {
        shard_stage_.resize(static_cast<size_t>(3 * S));
        piece = shard_stage_.data();
      }
      if (sh_.sharded() && shards == Shards::every_rank) {
        STRATA_RETURN_IF_ERROR(world_.broadcast(piece, 3 * S * 4, r));
      }
      const int64_t n = sh.end - sh.begin;
      STRATA_RETURN_IF_ERROR(take({sh.begin, n, piece, piece + S, piece + 2 * S}));
    }
  }
  return Status::ok_status();
}

Status OffloadState::write_slab_pieces(int64_t slab, const SlabPieceFn& fill) {
  if (slab == sh_.layout.embed_slab() || slab == sh_.layout.final_slab()) {
    return embed_slab_pieces(IoOp::write, slab, optim_stage0(), fill);
  }
  const int64_t block = slab - sh_.layout.block_slab(0);
  STRATA_RETURN_IF_ERROR(frozen_pieces(block, IoOp::write, fill));
  for (const auto& [name, part] : optim_parts(block)) {
    SlotMemory& sm = *memory_.at(name);
    const int64_t S = sh_.owned_part(part).stride;
    const bool on_storage = sm.tier == Tier::storage;
    // (3, S) master, m, v of this rank's shard of the part
    float* st = on_storage ? memory_.at(names::kOptimStage.at(0))->buf.f32() : sm.buf.f32();
    // Note [Sharded optimizer state]: the checkpoint holds every shard; this rank keeps its own
    // state; every shard's working params are staged, and the flush writes this rank's ranges
    // (Note [Sharded working params]). One rank: one piece, its own.
    for (int r = 0; r < world_.size(); ++r) {
      const PartShard sh = sh_.rank_shard(part, r);
      const int64_t n = sh.end - sh.begin;
      const bool own = r == world_.rank();
      if (!own) shard_stage_.resize(static_cast<size_t>(3 * S));
      float* piece = own ? st : shard_stage_.data();  // (3, S)
      // A shard shorter than the stride leaves a tail the fill does not cover: zero, as at start.
      if (own && n < S) std::memset(piece, 0, static_cast<size_t>(S * 12));
      STRATA_RETURN_IF_ERROR(fill({sh.begin, n, piece, piece + S, piece + 2 * S}));
      if (own && on_storage) STRATA_RETURN_IF_ERROR(store_io(sm, IoOp::write, 0, st, S * 12));
      stage_block_params(sh.begin, piece, n);
    }
  }
  return flush_block_params(block);
}

Status OffloadState::frozen_pieces(int64_t block, IoOp op, const SlabPieceFn& fn) {
  const int64_t frozen = sh_.frozen_elems, width = sh_.bf16 ? 2 : 4;
  const SlotMemory& sm = *memory_.at(names::params_store(block));
  for (int64_t lo = 0; lo < frozen; lo += frozen_chunk_) {
    const int64_t len = std::min(frozen_chunk_, frozen - lo);
    float* master = frozen_state_.f32();  // (3, chunk): master, m, v
    float *m = master + frozen_chunk_, *v = m + frozen_chunk_;
    std::fill_n(m, len, 0.0f);
    std::fill_n(v, len, 0.0f);
    if (op == IoOp::write) {  // from the checkpoint into the stage write_slab_pieces flushes
      STRATA_RETURN_IF_ERROR(fn({lo, len, master, m, v}));
      stage_block_params(lo, master, len);
      continue;
    }
    // The params as stored (chunks and the prefix are whole I/O units: frozen_elems_for).
    const void* raw = frozen_raw_.data();  // read into it from storage, or the host store's
    if (sm.tier == Tier::storage) {
      STRATA_RETURN_IF_ERROR(store_io(sm, IoOp::read, lo * width, frozen_raw_.data(), len * width));
    } else {
      raw = static_cast<const char*>(sm.buf.data()) + lo * width;
    }
    if (sh_.bf16) {
      cpu::convert_bf16_to_f32(master, reinterpret_cast<const bf16_t*>(raw), len);
    } else {
      std::memcpy(master, raw, static_cast<size_t>(len * 4));
    }
    STRATA_RETURN_IF_ERROR(fn({lo, len, master, m, v}));
  }
  return Status::ok_status();
}

Status OffloadState::embed_chunk_io(IoOp op, int64_t lo, int64_t len, float* stage) {
  const SlotMemory& sm = *memory_.at(names::kEmbedOptim);
  for (int64_t a = 0; a < 3; ++a) {
    STRATA_RETURN_IF_ERROR(
        store_io(sm, op, (a * sh_.embed_elems + lo) * 4, stage + a * len, len * 4));
  }
  return Status::ok_status();
}

Status OffloadState::embed_slab_pieces(IoOp op, int64_t slab, float* stage, const SlabPieceFn& fn,
                                       Range within) {
  // The embed group's state is (3, E): master, m, v, each the embedding slab then the final.
  const int64_t E = sh_.embed_elems;
  const Slab& s = sh_.layout.slabs.at(static_cast<size_t>(slab));
  const int64_t g0 = slab == sh_.layout.embed_slab() ? 0 : E - s.numel, g1 = g0 + s.numel;
  // A written piece's working params: the device's copy of the master (f32), or its bf16
  // rounding, built in the idle host params slot (Note [Precision modes]).
  auto working = [&](int64_t at, const float* master, int64_t count) {
    if (!sh_.bf16) return write_slot(names::kEmbedParams, at * 4, master, count * 4);
    float* rounded = memory_.at(names::kEmbedParamsHost)->buf.f32() + at;
    round_to_bf16(rounded, master, count);
    return write_slot(names::kEmbedParams, at * 4, rounded, count * 4);
  };
  SlotMemory& sm = *memory_.at(names::kEmbedOptim);
  if (sm.tier != Tier::storage) {
    float* st = sm.buf.f32();
    STRATA_RETURN_IF_ERROR(fn({0, s.numel, st + g0, st + E + g0, st + 2 * E + g0}));
    return op == IoOp::write ? working(g0, st + g0, s.numel) : Status::ok_status();
  }
  for (int32_t k = 0;; ++k) {  // stage: (3, chunk)
    const auto [lo, hi] = sh_.embed_chunk_range(k);
    if (lo >= g1) break;
    const int64_t a = std::max(lo, g0), b = std::min(hi, g1), len = hi - lo;
    if (a >= b) continue;
    if (op == IoOp::read) {  // only the slab's part of the chunk (slab starts are aligned)
      if (b - g0 <= within.begin || a - g0 >= within.end) continue;  // slab coordinates
      STRATA_RETURN_IF_ERROR(embed_chunk_io(IoOp::read, a, b - a, stage));
      STRATA_RETURN_IF_ERROR(fn({a - g0, b - a, stage, stage + (b - a), stage + 2 * (b - a)}));
      continue;
    }
    // Writes cover whole chunks (a checksummed store writes no less): one that covers part of
    // a chunk (the one both slabs share) reads it first and keeps the rest.
    if (a != lo || b != hi) STRATA_RETURN_IF_ERROR(embed_chunk_io(IoOp::read, lo, len, stage));
    float* at = stage + (a - lo);
    STRATA_RETURN_IF_ERROR(fn({a - g0, b - a, at, at + len, at + 2 * len}));
    STRATA_RETURN_IF_ERROR(embed_chunk_io(IoOp::write, lo, len, stage));
    STRATA_RETURN_IF_ERROR(working(a, at, b - a));
  }
  return Status::ok_status();
}

}  // namespace strata
