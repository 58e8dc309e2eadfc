// The horizontal (ZeRO-Infinity order) plan generator; see schedule_horizontal.h.
#include "sched/schedule_horizontal.h"

#include <string>
#include <vector>

namespace strata {

Plan make_horizontal_plan(const ScheduleSpec& s) {
  SlotDepBuilder b;
  const int L = s.blocks, M = s.micro_batches;
  const int64_t P = s.block_param_bytes, G = s.block_grad_bytes, O = s.block_optim_bytes,
                C = s.checkpoint_bytes;
  const BlockTiers tiers = block_tiers(s);

  // ---- Slots ----------------------------------------------------------------------------------
  const CommonSlots c = add_common_slots(b, s);
  std::vector<int32_t> pstore, ostore, gacc, ckpt;
  for (int l = 0; l < L; ++l) {
    const std::string n = std::to_string(l);
    pstore.push_back(b.slot("params.store.blk" + n, tiers.params[l], P, true));
    ostore.push_back(b.slot("optim.store.blk" + n, tiers.optim[l], O, true));
    gacc.push_back(b.slot("grad.host.blk" + n, Tier::host, G));
    ckpt.push_back(b.slot("ckpt.blk" + n, tiers.checkpoints[l], C));  // reused by every micro-batch
  }
  const int32_t act = b.slot("act", Tier::device, C);    // forward activation, updated in place
  const int32_t dact = b.slot("dact", Tier::device, C);  // gradient w.r.t. the current activation
  // Double buffers; the ones that only stage for storage exist only when something is there.
  std::vector<int32_t> pbuf, pstage, gbuf, gstage, bin, cstage, ostage, pwstage;
  for (int k = 0; k < 2; ++k) {
    const std::string n = std::to_string(k);
    pbuf.push_back(b.slot("params.buf" + n, Tier::device, P));
    gbuf.push_back(b.slot("grad.buf" + n, Tier::device, G));
    gstage.push_back(b.slot("grad.stage" + n, Tier::host, G));
    bin.push_back(b.slot("bwd.in.buf" + n, Tier::device, C));
    if (tiers.params_on_storage) {
      pstage.push_back(b.slot("params.stage" + n, Tier::host, P));
      pwstage.push_back(b.slot("params.wstage" + n, Tier::host, P));
    }
    if (tiers.checkpoints_on_storage) cstage.push_back(b.slot("ckpt.stage" + n, Tier::host, C));
    if (tiers.optim_on_storage) ostage.push_back(b.slot("optim.stage" + n, Tier::host, O));
  }

  // ---- Helpers --------------------------------------------------------------------------------
  int fetches = 0, cstages = 0, grads = 0, loads = 0;
  // storage -> host stage (if on storage) -> device double buffer; returns the device slot.
  auto fetch_params = [&](int l) {
    const int k = fetches++ % 2;
    int32_t src = pstore[l];
    if (tiers.params[l] == Tier::storage) {
      b.task(TaskKind::fetch, Resource::storage_read, "read.params " + blk_tag(l), l, -1,
             {slot_read(pstore[l]), slot_write(pstage[k])}, P);
      src = pstage[k];
    }
    b.task(TaskKind::fetch, Resource::h2d, "fetch.params " + blk_tag(l), l, -1,
           {slot_read(src), slot_write(pbuf[k])}, P);
    return pbuf[k];
  };

  // ---- Forward and backward, one micro-batch at a time ----------------------------------------
  add_iteration_start(b, c, s);
  for (int m = 0; m < M; ++m) {
    const std::string mb = "mb." + std::to_string(m);
    b.task(TaskKind::forward, Resource::compute, "embed.fwd " + mb, -1, m,
           {slot_read(c.embed), slot_read(c.tokens_device), slot_write(act)});
    for (int l = 0; l < L; ++l) {
      const int32_t params = fetch_params(l);
      // The block's input leaves the device before the forward overwrites it in place.
      if (tiers.checkpoints[l] == Tier::storage) {
        const int32_t st = cstage[cstages++ % 2];
        b.task(TaskKind::store, Resource::d2h, "ckpt.write " + blk_tag(l, m), l, m,
               {slot_read(act), slot_write(st)}, C);
        b.task(TaskKind::store, Resource::storage_write, "ckpt.flush " + blk_tag(l, m), l, m,
               {slot_read(st), slot_write(ckpt[l])}, C);
      } else {
        b.task(TaskKind::store, Resource::d2h, "ckpt.write " + blk_tag(l, m), l, m,
               {slot_read(act), slot_write(ckpt[l])}, C);
      }
      b.task(TaskKind::forward, Resource::compute, "fwd " + blk_tag(l, m), l, m,
             {slot_read(params), slot_read(act), slot_write(act)}, 0, s.block_fwd_flops);
    }
    b.task(TaskKind::loss, Resource::compute, "loss " + mb, L - 1, m,
           {slot_read(act), slot_read(c.embed), slot_read(c.tokens_device), slot_write(dact),
            slot_read(c.embed_grad), slot_write(c.embed_grad), slot_write(c.losses)},
           0, s.head_flops);
    for (int l = L - 1; l >= 0; --l) {
      const int32_t params = fetch_params(l);
      const int32_t in = bin[loads++ % 2];
      int32_t src = ckpt[l];
      if (tiers.checkpoints[l] == Tier::storage) {
        src = cstage[cstages++ % 2];
        b.task(TaskKind::fetch, Resource::storage_read, "ckpt.read " + blk_tag(l, m), l, m,
               {slot_read(ckpt[l]), slot_write(src)}, C);
      }
      b.task(TaskKind::fetch, Resource::h2d, "ckpt.load " + blk_tag(l, m), l, m,
             {slot_read(src), slot_write(in)}, C);
      const int j = grads++ % 2;
      b.task(TaskKind::backward, Resource::compute, "bwd " + blk_tag(l, m), l, m,
             {slot_read(params), slot_read(in), slot_read(dact), slot_write(dact),
              slot_write(gbuf[j])},
             0, s.block_fwd_flops + s.block_bwd_flops);
      // The partial gradient leaves the device every micro-batch and is summed on host.
      b.task(TaskKind::store, Resource::d2h, "grad.out " + blk_tag(l, m), l, m,
             {slot_read(gbuf[j]), slot_write(gstage[j])}, G);
      std::vector<SlotUse> acc = {slot_read(gstage[j]), slot_write(gacc[l])};
      if (m > 0) acc.push_back(slot_read(gacc[l]));
      b.task(TaskKind::other, Resource::cpu_optim, "acc " + blk_tag(l, m), l, m, acc, G);
      if (m == M - 1) add_grad_sumsq(b, l, gacc[l], G, c.sums);
    }
    b.task(TaskKind::backward, Resource::compute, "embed.bwd " + mb, -1, m,
           {slot_read(dact), slot_read(c.tokens_device), slot_read(c.embed_grad),
            slot_write(c.embed_grad)});
  }

  // ---- Norm, then the optimizer step after the last backward, pipelined over blocks ------------
  add_iteration_end(b, c, s, [&] {
    for (int l = L - 1, k = 0; l >= 0; --l, k ^= 1) {
      const bool pst = tiers.params[l] == Tier::storage;
      add_optimizer_step(
          b, s, l, -1,
          {gacc[l], c.clip, ostore[l], tiers.optim[l] == Tier::storage ? ostage[k] : -1,
           pst ? pwstage[k] : pstore[l], pstore[l]});
    }
  });
  return b.take();
}

}  // namespace strata
