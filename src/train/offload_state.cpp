// The offloaded trainer's state outside plans: the initial parameters and optimizer state, and
// whole-slab reads and writes for checkpoints and read_params. Each goes through the slots' own
// memory (device, host or the store), staged through slots that are idle between steps so that
// the host peak stays what the plan says (bf16 mode adds one block's bf16 stage of its own).
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/dtype.h"
#include "core/slow_progress.h"
#include "model/init.h"
#include "train/offload_internal.h"
#include "sched/slot_names.h"

namespace strata {

namespace names = slot_names;

Status OffloadTrainer::write_slot(const std::string& name, int64_t offset, const void* src,
                                  int64_t bytes) {
  SlotMemory& m = *memory_.at(name);
  if (m.tier != Tier::storage) {
    if (m.tier == Tier::device) {
      dev_.copy(*h2d_, static_cast<char*>(m.buf.data()) + offset, src, bytes);
      h2d_->synchronize();
    } else {
      std::memcpy(static_cast<char*>(m.buf.data()) + offset, src, static_cast<size_t>(bytes));
    }
    return Status::ok_status();
  }
  return store_io(m, IoOp::write, offset, const_cast<void*>(src), bytes);
}

Status OffloadTrainer::read_slot(const std::string& name, int64_t offset, void* dst,
                                 int64_t bytes) {
  SlotMemory& m = *memory_.at(name);
  if (m.tier != Tier::storage) {
    if (m.tier == Tier::device) {
      dev_.copy(*d2h_, dst, static_cast<const char*>(m.buf.data()) + offset, bytes);
      d2h_->synchronize();
    } else {
      std::memcpy(dst, static_cast<const char*>(m.buf.data()) + offset, static_cast<size_t>(bytes));
    }
    return Status::ok_status();
  }
  return store_io(m, IoOp::read, offset, dst, bytes);
}

float* OffloadTrainer::plan_block_stage() {
  for (const std::string& name :
       {names::grad_store(0), names::kGradWstage.at(0), names::kGradRstage.at(0)}) {
    auto it = memory_.find(name);
    if (it != memory_.end() && it->second->tier == Tier::host &&
        it->second->bytes >= block_elems_ * 4) {
      return it->second->buf.f32();
    }
  }
  return nullptr;
}

Status OffloadTrainer::ensure_idle_block_stage() {
  if (plan_block_stage() != nullptr || spare_stage_) return Status::ok_status();
  // No host gradient slot or stage holds a whole block (every gradient on storage with none of
  // its stages in the plans, or only shards of gradients kept: Note [Sharded optimizer
  // state]): one block's worth beside what the plan counts, aligned for direct I/O.
  STRATA_ASSIGN_OR_RETURN(spare_stage_,
                          HostBuffer::allocate(static_cast<uint64_t>(block_elems_) * 4, false));
  return Status::ok_status();
}

float* OffloadTrainer::idle_block_stage() {
  float* stage = plan_block_stage();
  return stage != nullptr ? stage : static_cast<float*>(spare_stage_.data());
}

Status OffloadTrainer::write_block_params(int64_t block, const float* master) {
  stage_block_params(0, master, block_elems_);
  return flush_block_params(block);
}

void OffloadTrainer::stage_block_params(int64_t lo, const float* master, int64_t count) {
  if (bf16_) {
    cpu::convert_f32_to_bf16(bf16_stage_.bf16() + lo, master, count);  // (n) bf16
    return;
  }
  float* stage = idle_block_stage() + lo;  // (n) f32
  if (stage != master) std::memcpy(stage, master, static_cast<size_t>(count * 4));
}

Status OffloadTrainer::flush_block_params(int64_t block) {
  return params_store_io(IoOp::write, block,
                         bf16_ ? bf16_stage_.data() : static_cast<void*>(idle_block_stage()));
}

Status OffloadTrainer::read_block_params(int64_t block, float* out) {
  const int64_t n = block_elems_;
  if (bf16_) {
    STRATA_RETURN_IF_ERROR(params_store_io(IoOp::read, block, bf16_stage_.data()));
    cpu::convert_bf16_to_f32(out, bf16_stage_.bf16(), n);
    return Status::ok_status();
  }
  float* stage = idle_block_stage();  // (n) f32
  STRATA_RETURN_IF_ERROR(params_store_io(IoOp::read, block, stage));
  std::memcpy(out, stage, static_cast<size_t>(n * 4));
  return Status::ok_status();
}

Status OffloadTrainer::params_store_io(IoOp op, int64_t block, void* stage, int32_t part) {
  const std::string name = names::params_store(block);
  const int64_t bytes = block_elems_ * (bf16_ ? 2 : 4);
  char* at = static_cast<char*>(stage);  // (block elems) f32 or bf16
  // Note [Sharded working params]: this rank's ranges, as the plans move them (one rank: the
  // part's range).
  for (const StoreRange& r : shard_store_ranges(shard_spec_, bytes, part)) {
    STRATA_RETURN_IF_ERROR(op == IoOp::write
                               ? write_slot(name, r.store_at, at + r.stage_at, r.bytes)
                               : read_slot(name, r.store_at, at + r.stage_at, r.bytes));
  }
  if (op == IoOp::write || !sharded()) return Status::ok_status();
  for (int32_t q : block_param_parts(shard_spec_, part)) {
    STRATA_RETURN_IF_ERROR(gather_params(at, q));
  }
  return Status::ok_status();
}

char* OffloadTrainer::params_at(const BoundPlan& bp, const Task& t, int64_t lo) const {
  const int32_t slot = slot_of(t, Role::params);
  char* base = static_cast<char*>(slot_ptr(bp, slot));
  const int64_t width = bf16_ ? 2 : 4, at = lo * width;
  const bool packed = sharded() && bp.slots[static_cast<size_t>(slot)] ==
                                       memory_.at(names::params_store(t.block)).get();
  if (!packed) return base + at;
  for (const StoreRange& r : shard_store_ranges(shard_spec_, block_elems_ * width, t.part)) {
    if (at >= r.stage_at && at < r.stage_at + r.bytes) return base + r.store_at + (at - r.stage_at);
  }
  return nullptr;
}

Status OffloadTrainer::initialize_state() {
  const int64_t n = block_elems_;
  // Staging for storage writes comes from slots that are idle before step 1 (a host gradient
  // slot, an optimizer stage), so the host peak stays what the plan says. bf16 (Note [Precision
  // modes]): the working params go through bf16_stage_, one block's bf16 beside the plan.
  if (bf16_) {
    STRATA_ASSIGN_OR_RETURN(bf16_stage_, dev_.alloc_host(round_up(n * 2, kIoAlign)));
    std::memset(bf16_stage_.data(), 0, static_cast<size_t>(bf16_stage_.bytes()));
  }
  STRATA_RETURN_IF_ERROR(ensure_idle_block_stage());
  float* slab = idle_block_stage();  // (n)
  SlowProgress progress("initializing the parameters and optimizer state", cfg_.model.n_layer,
                        "blocks");
  for (int64_t l = 0; l < cfg_.model.n_layer; ++l) {
    progress.update(l);
    std::memset(slab, 0, static_cast<size_t>(n * 4));
    init_param_slab(layout_, layout_.block_slab(l), slab, static_cast<uint64_t>(cfg_.seed));
    STRATA_RETURN_IF_ERROR(write_block_params(l, slab));
    for (const auto& [name, part] : optim_parts(l)) {
      SlotMemory& sm = *memory_.at(name);
      const PartShard sh = owned_part(part);  // Note [Sharded optimizer state]
      const int64_t S = sh.stride;
      // (3, S): master, m, v of this rank's shard of the part.
      const bool on_storage = sm.tier == Tier::storage;
      float* state = on_storage ? memory_.at(names::kOptimStage.at(0))->buf.f32() : sm.buf.f32();
      std::memset(state, 0, static_cast<size_t>(S * 12));
      std::memcpy(state, slab + sh.begin, static_cast<size_t>((sh.end - sh.begin) * 4));
      if (on_storage) STRATA_RETURN_IF_ERROR(write_slot(name, 0, state, S * 12));
    }
  }
  // The embed group: params on the device, the master copy and zeroed moments in its state.
  // Built in its host params slot, idle before step 1.
  const int64_t E = embed_elems_;
  const int64_t ne = layout_.slabs[static_cast<size_t>(layout_.embed_slab())].numel;
  float* group = memory_.at(names::kEmbedParamsHost)->buf.f32();  // (E)
  std::memset(group, 0, static_cast<size_t>(E * 4));
  init_param_slab(layout_, layout_.embed_slab(), group, static_cast<uint64_t>(cfg_.seed));
  init_param_slab(layout_, layout_.final_slab(), group + ne, static_cast<uint64_t>(cfg_.seed));
  STRATA_RETURN_IF_ERROR(embed_state_io(IoOp::write, 0, group, E));
  if (bf16_) {
    round_to_bf16(group, group, E);  // f32 on the device
  }
  STRATA_RETURN_IF_ERROR(write_slot(names::kEmbedParams, 0, group, E * 4));
  std::memset(slab, 0, static_cast<size_t>(n * 4));
  for (int64_t at = E; at < 3 * E; at += n) {  // m = v = 0, a block's worth at a time
    STRATA_RETURN_IF_ERROR(
        write_slot(names::kEmbedOptim, at * 4, slab, std::min(n, 3 * E - at) * 4));
  }
  return Status::ok_status();
}

Status OffloadTrainer::embed_state_io(IoOp op, int64_t at, float* data, int64_t elems) {
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
  for (int64_t i = 0; i < elems; i += block_elems_) {
    const int64_t k = std::min(block_elems_, elems - i);
    if (op == IoOp::write) std::memcpy(stage, data + i, static_cast<size_t>(k * 4));
    STRATA_RETURN_IF_ERROR(store_io(sm, op, (at + i) * 4, stage, k * 4));
    if (op == IoOp::read) std::memcpy(data + i, stage, static_cast<size_t>(k * 4));
  }
  return Status::ok_status();
}

Status OffloadTrainer::read_params(float* host) {
  STRATA_RETURN_IF_ERROR(finish());
  for (int64_t l = 0; l < cfg_.model.n_layer; ++l) {
    const Slab& s = layout_.slabs[static_cast<size_t>(layout_.block_slab(l))];
    STRATA_RETURN_IF_ERROR(read_block_params(l, host + s.offset));
  }
  // The embed group's working params are its master weights (the first E elements of its
  // state; bf16 mode: rounded).
  const Slab& e = layout_.slabs[static_cast<size_t>(layout_.embed_slab())];
  const Slab& f = layout_.slabs[static_cast<size_t>(layout_.final_slab())];
  STRATA_RETURN_IF_ERROR(embed_state_io(IoOp::read, 0, host + e.offset, e.numel));
  STRATA_RETURN_IF_ERROR(embed_state_io(IoOp::read, e.numel, host + f.offset, f.numel));
  if (bf16_) {
    for (const Slab* g : {&e, &f}) {
      round_to_bf16(host + g->offset, host + g->offset, g->numel);
    }
  }
  return Status::ok_status();
}

std::vector<std::pair<std::string, int32_t>> OffloadTrainer::optim_parts(int64_t block) const {
  std::vector<std::pair<std::string, int32_t>> out;
  for (int32_t part : {-1, 0, 1}) {
    std::string name = names::optim_store(block, part);
    if (memory_.count(name) != 0) out.emplace_back(std::move(name), part);
  }
  return out;
}

Status OffloadTrainer::read_slab_pieces(int64_t slab, const SlabPieceFn& take) {
  STRATA_RETURN_IF_ERROR(finish());
  return state_pieces(slab, optim_stage0(), take);
}

float* OffloadTrainer::optim_stage0() {
  auto it = memory_.find(names::kOptimStage.at(0));
  return it == memory_.end() ? nullptr : it->second->buf.f32();
}

Status OffloadTrainer::read_shard_pieces(int64_t slab, int rank, int ranks,
                                         const SlabPieceFn& take) {
  const bool block = slab != layout_.embed_slab() && slab != layout_.final_slab();
  if (!block) {  // replicated: this rank's ranks-th part, reading only the chunks that hold it
    const Slab& s = layout_.slabs.at(static_cast<size_t>(slab));
    const Range share = shard_range(s.numel, ranks, rank);
    STRATA_RETURN_IF_ERROR(finish());
    return embed_slab_pieces(IoOp::read, slab, optim_stage0(), clipped_to(share, take), share);
  }
  if (!sharded()) return Trainer::read_shard_pieces(slab, rank, ranks, take);
  if (rank != world_.rank() || ranks != world_.size()) {
    return internal_error("the share of rank " + std::to_string(rank) + " of " +
                          std::to_string(ranks) + " asked of rank " +
                          std::to_string(world_.rank()) + " of " + std::to_string(world_.size()) +
                          ": a rank reads only its own shard");
  }
  STRATA_RETURN_IF_ERROR(finish());
  return state_pieces(slab, optim_stage0(), take, Shards::own_only);
}

Status OffloadTrainer::state_pieces(int64_t slab, float* stage, const SlabPieceFn& take,
                                    Shards shards) {
  if (slab == layout_.embed_slab() || slab == layout_.final_slab()) {
    return embed_slab_pieces(IoOp::read, slab, stage, take);
  }
  const int64_t block = slab - layout_.block_slab(0);
  for (const auto& [name, part] : optim_parts(block)) {
    SlotMemory& sm = *memory_.at(name);
    const PartShard own = owned_part(part);
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
      const PartShard sh = rank_shard(part, r);
      float* piece = st;  // (3, S)
      if (r != world_.rank()) {
        shard_stage_.resize(static_cast<size_t>(3 * S));
        piece = shard_stage_.data();
      }
      if (sharded() && shards == Shards::every_rank) {
        STRATA_RETURN_IF_ERROR(world_.broadcast(piece, 3 * S * 4, r));
      }
      const int64_t n = sh.end - sh.begin;
      STRATA_RETURN_IF_ERROR(take({sh.begin, n, piece, piece + S, piece + 2 * S}));
    }
  }
  return Status::ok_status();
}

Status OffloadTrainer::write_slab_pieces(int64_t slab, const SlabPieceFn& fill) {
  pending_ = Pending::none;
  if (slab == layout_.embed_slab() || slab == layout_.final_slab()) {
    return embed_slab_pieces(IoOp::write, slab, optim_stage0(), fill);
  }
  const int64_t block = slab - layout_.block_slab(0);
  for (const auto& [name, part] : optim_parts(block)) {
    SlotMemory& sm = *memory_.at(name);
    const int64_t S = owned_part(part).stride;
    const bool on_storage = sm.tier == Tier::storage;
    // (3, S) master, m, v of this rank's shard of the part
    float* st = on_storage ? memory_.at(names::kOptimStage.at(0))->buf.f32() : sm.buf.f32();
    // Note [Sharded optimizer state]: the checkpoint holds every shard; this rank keeps its own
    // state; every shard's working params are staged, and the flush writes this rank's ranges
    // (Note [Sharded working params]). One rank: one piece, its own.
    for (int r = 0; r < world_.size(); ++r) {
      const PartShard sh = rank_shard(part, r);
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

Status OffloadTrainer::embed_chunk_io(IoOp op, int64_t lo, int64_t len, float* stage) {
  const SlotMemory& sm = *memory_.at(names::kEmbedOptim);
  for (int64_t a = 0; a < 3; ++a) {
    STRATA_RETURN_IF_ERROR(store_io(sm, op, (a * embed_elems_ + lo) * 4, stage + a * len, len * 4));
  }
  return Status::ok_status();
}

Status OffloadTrainer::embed_slab_pieces(IoOp op, int64_t slab, float* stage, const SlabPieceFn& fn,
                                         Range within) {
  // The embed group's state is (3, E): master, m, v, each the embedding slab then the final.
  const int64_t E = embed_elems_;
  const Slab& s = layout_.slabs.at(static_cast<size_t>(slab));
  const int64_t g0 = slab == layout_.embed_slab() ? 0 : E - s.numel, g1 = g0 + s.numel;
  // A written piece's working params: the device's copy of the master (f32), or its bf16
  // rounding, built in the idle host params slot (Note [Precision modes]).
  auto working = [&](int64_t at, const float* master, int64_t count) {
    if (!bf16_) return write_slot(names::kEmbedParams, at * 4, master, count * 4);
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
    const auto [lo, hi] = embed_chunk_range(k);
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
