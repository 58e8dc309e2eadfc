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
  const Tier ptier = offload_tier(s.params), otier = offload_tier(s.optim),
             ctier = offload_tier(s.checkpoints);

  // ---- Slots ----------------------------------------------------------------------------------
  std::vector<int32_t> pstore, ostore, gacc, ckpt;
  for (int l = 0; l < L; ++l) {
    const std::string n = std::to_string(l);
    pstore.push_back(b.slot("params.store.blk" + n, ptier, P, true));
    ostore.push_back(b.slot("optim.store.blk" + n, otier, O, true));
    gacc.push_back(b.slot("grad.host.blk" + n, Tier::host, G));
    ckpt.push_back(b.slot("ckpt.blk" + n, ctier, C));  // reused by every micro-batch
  }
  const int32_t embed = b.slot("embed.params", Tier::device, s.embed_param_bytes, true);
  const int32_t embed_grad = b.slot("embed.grad", Tier::device, s.embed_param_bytes);
  const int32_t act = b.slot("act", Tier::device, C);    // forward activation, updated in place
  const int32_t dact = b.slot("dact", Tier::device, C);  // gradient w.r.t. the current activation
  // Double buffers; the ones that only staging for storage exist only when something is there.
  std::vector<int32_t> pbuf, pstage, gbuf, gstage, bin, cstage, ostage, pwstage;
  for (int k = 0; k < 2; ++k) {
    const std::string n = std::to_string(k);
    pbuf.push_back(b.slot("params.buf" + n, Tier::device, P));
    gbuf.push_back(b.slot("grad.buf" + n, Tier::device, G));
    gstage.push_back(b.slot("grad.stage" + n, Tier::host, G));
    bin.push_back(b.slot("bwd.in.buf" + n, Tier::device, C));
    if (ptier == Tier::storage) {
      pstage.push_back(b.slot("params.stage" + n, Tier::host, P));
      pwstage.push_back(b.slot("params.wstage" + n, Tier::host, P));
    }
    if (ctier == Tier::storage) cstage.push_back(b.slot("ckpt.stage" + n, Tier::host, C));
    if (otier == Tier::storage) ostage.push_back(b.slot("optim.stage" + n, Tier::host, O));
  }

  // ---- Helpers --------------------------------------------------------------------------------
  int fetches = 0, cstages = 0, grads = 0, loads = 0;
  // storage -> host stage (if on storage) -> device double buffer; returns the device slot.
  auto fetch_params = [&](int l) {
    const int k = fetches++ % 2;
    int32_t src = pstore[l];
    if (ptier == Tier::storage) {
      b.task(TaskKind::fetch, Resource::storage_read, "read.params " + blk_tag(l), l, -1,
             {slot_read(pstore[l]), slot_write(pstage[k])}, P);
      src = pstage[k];
    }
    b.task(TaskKind::fetch, Resource::h2d, "fetch.params " + blk_tag(l), l, -1,
           {slot_read(src), slot_write(pbuf[k])}, P);
    return pbuf[k];
  };

  // ---- Forward and backward, one micro-batch at a time ----------------------------------------
  for (int m = 0; m < M; ++m) {
    b.task(TaskKind::forward, Resource::compute, "embed.fwd mb." + std::to_string(m), -1, m,
           {slot_read(embed), slot_write(act)});
    for (int l = 0; l < L; ++l) {
      const int32_t params = fetch_params(l);
      // The block's input leaves the device before the forward overwrites it in place.
      if (ctier == Tier::storage) {
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
    b.task(TaskKind::loss, Resource::compute, "loss mb." + std::to_string(m), L - 1, m,
           {slot_read(act), slot_write(dact)});
    for (int l = L - 1; l >= 0; --l) {
      const int32_t params = fetch_params(l);
      const int32_t in = bin[loads++ % 2];
      int32_t src = ckpt[l];
      if (ctier == Tier::storage) {
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
    }
    std::vector<SlotUse> eb = {slot_read(dact), slot_write(embed_grad)};
    if (m > 0) eb.push_back(slot_read(embed_grad));
    b.task(TaskKind::backward, Resource::compute, "embed.bwd mb." + std::to_string(m), -1, m, eb);
  }

  // ---- Optimizer step after the last backward, pipelined over blocks --------------------------
  for (int l = L - 1, k = 0; l >= 0; --l, k ^= 1) {
    add_optimizer_step(b, l,
                       {gacc[l], ostore[l], otier == Tier::storage ? ostage[k] : -1, pstore[l],
                        ptier == Tier::storage ? pwstage[k] : -1},
                       O, P);
  }
  return b.take();
}

}  // namespace strata
