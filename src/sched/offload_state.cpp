// The offloaded trainer's state outside plans: the initial parameters and optimizer state, and
// whole-slab reads and writes for checkpoints and read_params. Each goes through the slots' own
// memory (device, host or the store), staged through slots that are idle between steps so that
// the host peak stays what the plan says (bf16 mode adds one block's bf16 stage of its own).
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/dtype.h"
#include "model/init.h"
#include "sched/offload_internal.h"
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

Status OffloadTrainer::write_block_params_bf16(int64_t block, const float* master) {
  const int64_t n = block_elems_;
  bf16_t* stage = bf16_stage_.bf16();  // (n) bf16
  cpu::convert_f32_to_bf16(stage, master, n);
  return write_slot(names::params_store(block), 0, stage, n * 2);
}

Status OffloadTrainer::initialize_state() {
  const int64_t n = block_elems_;
  // f32: staging for storage writes comes from slots that are idle before step 1 (block 0's host
  // gradient, an optimizer stage), so the host peak stays what the plan says. bf16 (Note
  // [Precision modes]): the f32 slab is a vector of our own and the working params go through
  // bf16_stage_, so neither depends on the plan's gradient slots.
  std::vector<float> own_slab;
  if (bf16_) {
    STRATA_ASSIGN_OR_RETURN(bf16_stage_, dev_.alloc_host(round_up(n * 2, kIoAlign)));
    std::memset(bf16_stage_.data(), 0, static_cast<size_t>(bf16_stage_.bytes()));
    own_slab.resize(static_cast<size_t>(n));
  }
  float* slab = bf16_ ? own_slab.data() : memory_.at(names::grad_host(0))->buf.f32();  // (n)
  for (int64_t l = 0; l < cfg_.model.n_layer; ++l) {
    std::memset(slab, 0, static_cast<size_t>(n * 4));
    init_gpt2_slab(layout_, layout_.block_slab(l), slab, static_cast<uint64_t>(cfg_.seed));
    STRATA_RETURN_IF_ERROR(bf16_ ? write_block_params_bf16(l, slab)
                                 : write_slot(names::params_store(l), 0, slab, n * 4));
    for (const auto& [name, part] : optim_parts(l)) {
      SlotMemory& sm = *memory_.at(name);
      const auto [lo, hi] = part_range(part);
      const int64_t pe = hi - lo;
      // (3, pe): master, m, v of the part.
      const bool on_storage = sm.tier == Tier::storage;
      float* state = on_storage ? memory_.at(names::kOptimStage.at(0))->buf.f32() : sm.buf.f32();
      std::memset(state, 0, static_cast<size_t>(pe * 12));
      std::memcpy(state, slab + lo, static_cast<size_t>(pe * 4));  // master; m = v = 0
      if (on_storage) STRATA_RETURN_IF_ERROR(write_slot(name, 0, state, pe * 12));
    }
  }
  std::memset(slab, 0, static_cast<size_t>(n * 4));
  // The embed group: params on the device, master copy and zeroed moments on host.
  const int64_t E = embed_elems_;
  const int64_t ne = layout_.slabs[static_cast<size_t>(layout_.embed_slab())].numel;
  std::vector<float> group(static_cast<size_t>(E), 0.0f);
  init_gpt2_slab(layout_, layout_.embed_slab(), group.data(), static_cast<uint64_t>(cfg_.seed));
  init_gpt2_slab(layout_, layout_.final_slab(), group.data() + ne,
                 static_cast<uint64_t>(cfg_.seed));
  float* es = memory_.at(names::kEmbedOptim)->buf.f32();
  std::memset(es, 0, static_cast<size_t>(E * 12));
  std::memcpy(es, group.data(), static_cast<size_t>(E * 4));
  if (bf16_) {
    for (float& w : group) w = bf16_round(w);  // f32 on the device, bf16 values
  }
  return write_slot(names::kEmbedParams, 0, group.data(), E * 4);
}

Status OffloadTrainer::read_params(float* host) {
  STRATA_RETURN_IF_ERROR(finish());
  const int64_t n = block_elems_;
  for (int64_t l = 0; l < cfg_.model.n_layer; ++l) {
    const Slab& s = layout_.slabs[static_cast<size_t>(layout_.block_slab(l))];
    if (bf16_) {
      STRATA_RETURN_IF_ERROR(read_slot(names::params_store(l), 0, bf16_stage_.data(), n * 2));
      cpu::convert_bf16_to_f32(host + s.offset, bf16_stage_.bf16(), n);
      continue;
    }
    // Block 0's host gradient is idle once no step is pending: the staging for storage reads.
    float* tmp = memory_.at(names::grad_host(0))->buf.f32();
    STRATA_RETURN_IF_ERROR(read_slot(names::params_store(l), 0, tmp, n * 4));
    std::memcpy(host + s.offset, tmp, static_cast<size_t>(n * 4));
  }
  // The embed group's working params are its master (bf16 mode: rounded).
  const float* master = memory_.at(names::kEmbedOptim)->buf.f32();
  const Slab& e = layout_.slabs[static_cast<size_t>(layout_.embed_slab())];
  const Slab& f = layout_.slabs[static_cast<size_t>(layout_.final_slab())];
  std::memcpy(host + e.offset, master, static_cast<size_t>(e.numel * 4));
  std::memcpy(host + f.offset, master + e.numel, static_cast<size_t>(f.numel * 4));
  if (bf16_) {
    for (const Slab* g : {&e, &f}) {
      for (int64_t i = g->offset; i < g->offset + g->numel; ++i) host[i] = bf16_round(host[i]);
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

Status OffloadTrainer::read_slab_state(int64_t slab, float* master, float* m, float* v) {
  STRATA_RETURN_IF_ERROR(finish());
  const Slab& s = layout_.slabs.at(static_cast<size_t>(slab));
  if (slab == layout_.embed_slab() || slab == layout_.final_slab()) {
    // The embed group on host: (3, E) master, m, v; the embedding slab first, then the final.
    const float* st = memory_.at(names::kEmbedOptim)->buf.f32();
    const int64_t E = embed_elems_;
    const int64_t at = slab == layout_.embed_slab() ? 0 : E - s.numel;
    std::memcpy(master, st + at, static_cast<size_t>(s.numel * 4));
    std::memcpy(m, st + E + at, static_cast<size_t>(s.numel * 4));
    std::memcpy(v, st + 2 * E + at, static_cast<size_t>(s.numel * 4));
    return Status::ok_status();
  }
  const int64_t block = slab - layout_.block_slab(0);
  for (const auto& [name, part] : optim_parts(block)) {
    const SlotMemory& sm = *memory_.at(name);
    const auto [lo, hi] = part_range(part);
    const int64_t pe = hi - lo;
    const float* st = sm.buf.f32();  // (3, pe) master, m, v of the part
    if (sm.tier == Tier::storage) {
      float* stage = memory_.at(names::kOptimStage.at(0))->buf.f32();
      STRATA_RETURN_IF_ERROR(store_io(sm, IoOp::read, 0, stage, pe * 12));
      st = stage;
    }
    std::memcpy(master + lo, st, static_cast<size_t>(pe * 4));
    std::memcpy(m + lo, st + pe, static_cast<size_t>(pe * 4));
    std::memcpy(v + lo, st + 2 * pe, static_cast<size_t>(pe * 4));
  }
  return Status::ok_status();
}

Status OffloadTrainer::write_slab_state(int64_t slab, const float* master, const float* m,
                                        const float* v) {
  pending_ = false;
  const Slab& s = layout_.slabs.at(static_cast<size_t>(slab));
  if (slab == layout_.embed_slab() || slab == layout_.final_slab()) {
    float* st = memory_.at(names::kEmbedOptim)->buf.f32();
    const int64_t E = embed_elems_;
    const int64_t at = slab == layout_.embed_slab() ? 0 : E - s.numel;
    std::memcpy(st + at, master, static_cast<size_t>(s.numel * 4));
    std::memcpy(st + E + at, m, static_cast<size_t>(s.numel * 4));
    std::memcpy(st + 2 * E + at, v, static_cast<size_t>(s.numel * 4));
    // The device's working copy is the master (f32), or its bf16 rounding in bf16 mode.
    if (!bf16_) return write_slot(names::kEmbedParams, at * 4, master, s.numel * 4);
    std::vector<float> rounded(master, master + s.numel);
    for (float& w : rounded) w = bf16_round(w);
    return write_slot(names::kEmbedParams, at * 4, rounded.data(), s.numel * 4);
  }
  const int64_t block = slab - layout_.block_slab(0);
  for (const auto& [name, part] : optim_parts(block)) {
    SlotMemory& sm = *memory_.at(name);
    const auto [lo, hi] = part_range(part);
    const int64_t pe = hi - lo;
    float* st =
        sm.tier == Tier::storage ? memory_.at(names::kOptimStage.at(0))->buf.f32() : sm.buf.f32();
    std::memcpy(st, master + lo, static_cast<size_t>(pe * 4));
    std::memcpy(st + pe, m + lo, static_cast<size_t>(pe * 4));
    std::memcpy(st + 2 * pe, v + lo, static_cast<size_t>(pe * 4));
    if (sm.tier == Tier::storage) STRATA_RETURN_IF_ERROR(store_io(sm, IoOp::write, 0, st, pe * 12));
  }
  // The working params: bf16 mode, the master's rounding (Note [Precision modes]); f32, the
  // master itself, staged through block 0's idle host gradient.
  if (bf16_) return write_block_params_bf16(block, master);
  float* stage = memory_.at(names::grad_host(0))->buf.f32();
  std::memcpy(stage, master, static_cast<size_t>(s.numel * 4));
  return write_slot(names::params_store(block), 0, stage, s.numel * 4);
}

}  // namespace strata
