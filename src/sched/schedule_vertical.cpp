// The vertical (GreedySnake) plan generator; see schedule_vertical.h.
#include "sched/schedule_vertical.h"

#include <string>
#include <vector>

namespace strata {

int32_t vertical_micro_batch(int32_t block, int32_t position, int32_t micro_batches) {
  return block % 2 == 0 ? position : micro_batches - 1 - position;
}

bool vertical_checkpoint_pinned(int32_t position, int32_t micro_batches) {
  return position < 2 || position >= micro_batches - 2;
}

Plan make_vertical_plan(const ScheduleSpec& s) {
  SlotDepBuilder b;
  const int L = s.blocks, M = s.micro_batches;
  const int64_t P = s.block_param_bytes, G = s.block_grad_bytes, O = s.block_optim_bytes,
                C = s.checkpoint_bytes;
  const Tier ptier = offload_tier(s.params), otier = offload_tier(s.optim),
             ctier = offload_tier(s.checkpoints);

  // ---- Slots ----------------------------------------------------------------------------------
  std::vector<int32_t> pstore, ostore, dact;
  std::vector<std::vector<int32_t>> ckpt(L, std::vector<int32_t>(M, -1));  // [block][mb]
  for (int l = 0; l < L; ++l) {
    pstore.push_back(b.slot("params.store.blk" + std::to_string(l), ptier, P, true));
    ostore.push_back(b.slot("optim.store.blk" + std::to_string(l), otier, O, true));
    for (int i = 0; i < M; ++i) {
      const int m = vertical_micro_batch(l, i, M);
      const Tier t = vertical_checkpoint_pinned(i, M) ? Tier::host : ctier;
      ckpt[l][m] = b.slot("ckpt.blk" + std::to_string(l) + ".mb" + std::to_string(m), t, C);
    }
  }
  for (int m = 0; m < M; ++m) {
    dact.push_back(b.slot("dact.mb" + std::to_string(m), Tier::device, C));
  }
  const int32_t embed = b.slot("embed.params", Tier::device, s.embed_param_bytes, true);
  const int32_t embed_grad = b.slot("embed.grad", Tier::device, s.embed_param_bytes);
  const int32_t last_out = b.slot("last.out", Tier::device, C);  // the last block's output
  std::vector<int32_t> pbuf, pstage, abuf, bin, gacc, ghost, cwstage, crstage, ostage, pwstage;
  for (int k = 0; k < 2; ++k) {
    const std::string n = std::to_string(k);
    pbuf.push_back(b.slot("params.buf" + n, Tier::device, P));
    abuf.push_back(b.slot("act.buf" + n, Tier::device, C));
    bin.push_back(b.slot("bwd.in.buf" + n, Tier::device, C));
    gacc.push_back(b.slot("grad.acc.buf" + n, Tier::device, G));
    ghost.push_back(b.slot("grad.host.buf" + n, Tier::host, G));
    if (ptier == Tier::storage) {
      pstage.push_back(b.slot("params.stage" + n, Tier::host, P));
      pwstage.push_back(b.slot("params.wstage" + n, Tier::host, P));
    }
    if (ctier == Tier::storage) {
      cwstage.push_back(b.slot("ckpt.wstage" + n, Tier::host, C));
      crstage.push_back(b.slot("ckpt.rstage" + n, Tier::host, C));
    }
    if (otier == Tier::storage) ostage.push_back(b.slot("optim.stage" + n, Tier::host, O));
  }

  // ---- Helpers --------------------------------------------------------------------------------
  int fetches = 0, cwrites = 0, creads = 0;
  std::vector<int32_t> params_slot(L, -1);
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
    params_slot[l] = pbuf[k];
  };
  // Device slot `from` -> checkpoint of block l's input for micro-batch m.
  auto write_ckpt = [&](int l, int m, int32_t from) {
    const int32_t dst = ckpt[l][m];
    if (b.peek_tier(dst) == Tier::storage) {
      const int32_t st = cwstage[cwrites++ % 2];
      b.task(TaskKind::store, Resource::d2h, "ckpt.write " + blk_tag(l, m), l, m,
             {slot_read(from), slot_write(st)}, C);
      b.task(TaskKind::store, Resource::storage_write, "ckpt.flush " + blk_tag(l, m), l, m,
             {slot_read(st), slot_write(dst)}, C);
    } else {
      b.task(TaskKind::store, Resource::d2h, "ckpt.write " + blk_tag(l, m), l, m,
             {slot_read(from), slot_write(dst)}, C);
    }
  };
  auto load_ckpt = [&](int l, int m, int32_t to) {
    int32_t src = ckpt[l][m];
    if (b.peek_tier(src) == Tier::storage) {
      const int32_t st = crstage[creads++ % 2];
      b.task(TaskKind::fetch, Resource::storage_read, "ckpt.read " + blk_tag(l, m), l, m,
             {slot_read(src), slot_write(st)}, C);
      src = st;
    }
    b.task(TaskKind::fetch, Resource::h2d, "ckpt.load " + blk_tag(l, m), l, m,
           {slot_read(src), slot_write(to)}, C);
  };
  // The gradient leaves the device once, then the block's optimizer pipeline is queued; it
  // runs on cpu_optim and the storage queues while compute goes on with earlier blocks.
  auto finish_block = [&](int l) {
    const int g = l % 2;
    b.task(TaskKind::store, Resource::d2h, "grad.out " + blk_tag(l), l, -1,
           {slot_read(gacc[g]), slot_write(ghost[g])}, G);
    add_optimizer_step(b, l,
                       {ghost[g], ostore[l], otier == Tier::storage ? ostage[g] : -1, pstore[l],
                        ptier == Tier::storage ? pwstage[g] : -1},
                       O, P);
  };
  auto zero_grad = [&](int l) {
    b.task(TaskKind::zero, Resource::compute, "grad.zero " + blk_tag(l), l, -1,
           {slot_write(gacc[l % 2])});
  };

  // ---- Forward (the last block: forward, loss and backward together) --------------------------
  fetch_params(0);
  int k = 0;  // act.buf holding the current micro-batch's input
  for (int l = 0; l < L; ++l) {
    // Queued now so that the h2d/storage queues fetch block l+1 while block l computes.
    if (l + 1 < L) fetch_params(l + 1);
    const bool last = l == L - 1;
    if (last) zero_grad(l);
    // Brings the input of the micro-batch at position i into act.buf[kk].
    auto prepare = [&](int i, int kk) {
      const int m = vertical_micro_batch(l, i, M);
      if (l == 0) {
        b.task(TaskKind::forward, Resource::compute, "embed.fwd mb." + std::to_string(m), -1, m,
               {slot_read(embed), slot_write(abuf[kk])});
        write_ckpt(0, m, abuf[kk]);
      } else {
        load_ckpt(l, m, abuf[kk]);
      }
    };
    // Position 0 of block l > 0 is the micro-batch that ended block l-1: already on device.
    if (l == 0) prepare(0, k);
    for (int i = 0; i < M; ++i) {
      const int m = vertical_micro_batch(l, i, M);
      if (i + 1 < M) prepare(i + 1, 1 - k);  // prefetch into the other buffer
      const int32_t in = abuf[k];
      const std::string t = blk_tag(l, m);
      if (!last) {
        b.task(TaskKind::forward, Resource::compute, "fwd " + t, l, m,
               {slot_read(params_slot[l]), slot_read(in), slot_write(in)}, 0, s.block_fwd_flops);
        write_ckpt(l + 1, m, in);  // the output is the next block's input
      } else {
        b.task(TaskKind::forward, Resource::compute, "fwd " + t, l, m,
               {slot_read(params_slot[l]), slot_read(in), slot_write(last_out)}, 0,
               s.block_fwd_flops);
        b.task(TaskKind::loss, Resource::compute, "loss mb." + std::to_string(m), l, m,
               {slot_read(last_out), slot_write(dact[m])});
        b.task(TaskKind::backward, Resource::compute, "bwd " + t, l, m,
               {slot_read(params_slot[l]), slot_read(in), slot_read(dact[m]), slot_write(dact[m]),
                slot_read(gacc[l % 2]), slot_write(gacc[l % 2])},
               0, s.block_bwd_flops);
      }
      if (i + 1 < M) k = 1 - k;
    }
  }
  finish_block(L - 1);

  // ---- Backward, blocks L-2..0, each in its forward order (continuing the snake) --------------
  if (L >= 2) fetch_params(L - 2);
  int j = 0;
  for (int l = L - 2; l >= 0; --l) {
    if (l >= 1) fetch_params(l - 1);
    zero_grad(l);
    load_ckpt(l, vertical_micro_batch(l, 0, M), bin[j]);
    for (int i = 0; i < M; ++i) {
      const int m = vertical_micro_batch(l, i, M);
      if (i + 1 < M) load_ckpt(l, vertical_micro_batch(l, i + 1, M), bin[1 - j]);
      b.task(TaskKind::backward, Resource::compute, "bwd " + blk_tag(l, m), l, m,
             {slot_read(params_slot[l]), slot_read(bin[j]), slot_read(dact[m]), slot_write(dact[m]),
              slot_read(gacc[l % 2]), slot_write(gacc[l % 2])},
             0, s.block_fwd_flops + s.block_bwd_flops);
      j = 1 - j;
    }
    finish_block(l);
  }
  for (int m = 0; m < M; ++m) {
    std::vector<SlotUse> eb = {slot_read(dact[m]), slot_write(embed_grad)};
    if (m > 0) eb.push_back(slot_read(embed_grad));
    b.task(TaskKind::backward, Resource::compute, "embed.bwd mb." + std::to_string(m), -1, m, eb);
  }
  return b.take();
}

}  // namespace strata
