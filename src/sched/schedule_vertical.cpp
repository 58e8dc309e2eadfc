// The vertical (GreedySnake) plan generator; see schedule_vertical.h.
#include "sched/schedule_vertical.h"

#include <array>
#include <string>
#include <vector>

namespace strata {

int32_t vertical_micro_batch(int32_t block, int32_t position, int32_t micro_batches) {
  return block % 2 == 0 ? position : micro_batches - 1 - position;
}

bool vertical_checkpoint_pinned(int32_t position, int32_t micro_batches) {
  return position < 2 || position >= micro_batches - 2;
}

bool vertical_acts_forwarded(int32_t block, int32_t position, int32_t blocks) {
  return block == blocks - 2 && position < 2;
}

Plan make_vertical_plan(const ScheduleSpec& s) {
  SlotDepBuilder b;
  const int L = s.blocks, M = s.micro_batches;
  const int64_t P = s.block_param_bytes, G = s.block_grad_bytes, O = s.block_optim_bytes,
                C = s.checkpoint_bytes;
  const int64_t n = s.block_elems, a = s.split_elems;
  const bool has_part0 = a > 0, has_part1 = n <= 0 || a < n;
  const int64_t part1_offset = part_bytes(P, n, a, 0);  // where part 1 starts in the params
  const BlockTiers tiers = block_tiers(s);

  // ---- Slots ----------------------------------------------------------------------------------
  const CommonSlots c = add_common_slots(b, s);
  std::vector<int32_t> pstore, ghost;
  std::vector<std::array<int32_t, 2>> ostore;                              // [block][part]
  std::vector<std::vector<int32_t>> ckpt(L, std::vector<int32_t>(M, -1));  // [block][mb]
  for (int l = 0; l < L; ++l) {
    const std::string n_l = std::to_string(l);
    pstore.push_back(b.slot("params.store.blk" + n_l, tiers.params[l], P, true));
    std::array<int32_t, 2> parts{-1, -1};
    for (int part = 0; part < 2; ++part) {
      if (part == 0 ? has_part0 : has_part1) {
        parts[part] = b.slot("optim.store.blk" + n_l + ".p" + std::to_string(part), tiers.optim[l],
                             part_bytes(O, n, a, part), true);
      }
    }
    ostore.push_back(parts);
    // Read by the pending part-1 steps before this iteration's backward writes it again.
    ghost.push_back(b.slot("grad.host.blk" + n_l, Tier::host, G, s.pending_steps));
    if (!s.iteration) continue;
    for (int i = 0; i < M; ++i) {
      const int m = vertical_micro_batch(l, i, M);
      const Tier t = vertical_checkpoint_pinned(i, M) ? Tier::host : tiers.checkpoints[l];
      ckpt[l][m] = b.slot("ckpt.blk" + n_l + ".mb" + std::to_string(m), t, C);
    }
  }
  // Saved activations (DESIGN §6): per block the policy, per (block, micro-batch) where its
  // saved set lives between forward and backward.
  auto apol = [&](int l) {
    return s.acts_at.empty() || l == L - 1 ? ActPolicy::recompute
                                           : s.acts_at[static_cast<size_t>(l)];
  };
  const int64_t A = s.acts_bytes;
  bool a_offload = false, a_storage = false;
  std::vector<std::vector<int32_t>> acts(L, std::vector<int32_t>(M, -1));  // [block][mb]
  for (int l = 0; s.iteration && l < L; ++l) {
    const ActPolicy p = apol(l);
    if (p == ActPolicy::recompute) continue;
    a_offload |= p == ActPolicy::host || p == ActPolicy::storage;
    for (int i = 0; i < M; ++i) {
      const int m = vertical_micro_batch(l, i, M);
      const bool forwarded = p == ActPolicy::storage && vertical_acts_forwarded(l, i, L);
      const Tier t = p == ActPolicy::keep                ? Tier::device
                     : p == ActPolicy::host || forwarded ? Tier::host
                                                         : Tier::storage;
      a_storage |= t == Tier::storage;
      acts[l][m] = b.slot("acts.blk" + std::to_string(l) + ".mb" + std::to_string(m), t, A);
    }
  }
  std::vector<int32_t> aout, ain, awstage, arstage;  // device and host double buffers
  for (int k = 0; a_offload && k < 2; ++k) {
    const std::string n_k = std::to_string(k);
    if (!s.compute_reads_host) {
      aout.push_back(b.slot("acts.out.buf" + n_k, Tier::device, A));
      ain.push_back(b.slot("acts.in.buf" + n_k, Tier::device, A));
    }
    if (a_storage) {
      awstage.push_back(b.slot("acts.wstage" + n_k, Tier::host, A));
      arstage.push_back(b.slot("acts.rstage" + n_k, Tier::host, A));
    }
  }
  std::vector<int32_t> dact;
  for (int m = 0; s.iteration && m < M; ++m) {
    dact.push_back(b.slot("dact.mb" + std::to_string(m), Tier::device, C));
  }
  const int32_t last_out = b.slot("last.out", Tier::device, C);  // the last block's output
  std::vector<int32_t> pbuf, pstage, abuf, bin, gacc, cwstage, crstage, ostage, pwstage;
  for (int k = 0; k < 2; ++k) {
    const std::string n_k = std::to_string(k);
    pbuf.push_back(b.slot("params.buf" + n_k, Tier::device, P));
    abuf.push_back(b.slot("act.buf" + n_k, Tier::device, C));
    bin.push_back(b.slot("bwd.in.buf" + n_k, Tier::device, C));
    gacc.push_back(b.slot("grad.acc.buf" + n_k, Tier::device, G));
    if (tiers.params_on_storage) {
      pstage.push_back(b.slot("params.stage" + n_k, Tier::host, P));
      pwstage.push_back(b.slot("params.wstage" + n_k, Tier::host, P));
    }
    if (tiers.checkpoints_on_storage) {
      cwstage.push_back(b.slot("ckpt.wstage" + n_k, Tier::host, C));
      crstage.push_back(b.slot("ckpt.rstage" + n_k, Tier::host, C));
    }
    if (tiers.optim_on_storage) ostage.push_back(b.slot("optim.stage" + n_k, Tier::host, O));
  }

  // ---- Helpers --------------------------------------------------------------------------------
  int fetches = 0, cwrites = 0, creads = 0, steps = 0;
  std::vector<bool> pending(L, s.pending_steps && has_part1);
  std::vector<int32_t> params_slot(L, -1);
  // One part of block l's step; new params go to `params_out` (a host slot).
  auto step = [&](int l, int part, int32_t params_out, bool needs_norm) {
    const int k = steps++ % 2;
    add_optimizer_step(b, s, l, part,
                       {ghost[l], needs_norm ? c.clip : -1, ostore[l][part],
                        tiers.optim[l] == Tier::storage ? ostage[k] : -1, params_out, pstore[l]});
  };
  // The copy of a block's params to the device is queued apart from its storage read (see
  // emit_fetch): the h2d queue runs in order, and a params copy that waits on storage must not
  // hold up the checkpoint loads the current block needs first.
  struct QueuedFetch {
    int l = -1;
    int32_t src = -1, dst = -1;
  } queued;
  auto emit_fetch = [&] {
    if (queued.l < 0) return;
    b.task(TaskKind::fetch, Resource::h2d, "fetch.params " + blk_tag(queued.l), queued.l, -1,
           {slot_read(queued.src), slot_write(queued.dst)}, P);
    queued = {};
  };
  // The pending part-1 step of block l (previous iteration's gradient), then, when `fetch`, the
  // block's params read toward the device (the h2d copy left to emit_fetch). On storage, part
  // 1's new params land in the fetch's stage and only part 0's range is read from storage.
  auto fetch_params = [&](int l, bool fetch) {
    const int k = fetches++ % 2;
    const bool on_storage = tiers.params[l] == Tier::storage;
    int32_t src = pstore[l];
    if (pending[l]) {
      pending[l] = false;
      if (on_storage) {
        src = pstage[k];
        if (fetch && part1_offset > 0) {
          Task t{.kind = TaskKind::fetch,
                 .resource = Resource::storage_read,
                 .label = "read.params " + blk_tag(l) + " p0"};
          t.block = l;
          t.uses = {slot_read(pstore[l]), slot_write(src)};
          t.bytes = part1_offset;
          b.task(std::move(t));
        }
      }
      step(l, 1, src, true);
    } else if (on_storage && fetch) {
      b.task(TaskKind::fetch, Resource::storage_read, "read.params " + blk_tag(l), l, -1,
             {slot_read(pstore[l]), slot_write(pstage[k])}, P);
      src = pstage[k];
    }
    if (!fetch) return;
    emit_fetch();  // at most one copy waits at a time
    queued = {l, src, pbuf[k]};
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
  // The saved set of (l, m), just written by the forward into device slot `from`, to its place
  // (host, or storage through a host stage), while the forward goes on.
  int awrites = 0, areads = 0;
  auto store_acts = [&](int l, int m, int32_t from) {
    const int32_t dst = acts[l][m];
    if (s.compute_reads_host) {  // produced in place: `from` is the host slot or the stage
      if (from != dst) {
        b.task(TaskKind::store, Resource::storage_write, "acts.flush " + blk_tag(l, m), l, m,
               {slot_read(from), slot_write(dst)}, A);
      }
      return;
    }
    if (b.peek_tier(dst) == Tier::storage) {
      const int32_t st = awstage[awrites++ % 2];
      b.task(TaskKind::store, Resource::d2h, "acts.write " + blk_tag(l, m), l, m,
             {slot_read(from), slot_write(st)}, A);
      b.task(TaskKind::store, Resource::storage_write, "acts.flush " + blk_tag(l, m), l, m,
             {slot_read(st), slot_write(dst)}, A);
    } else {
      b.task(TaskKind::store, Resource::d2h, "acts.write " + blk_tag(l, m), l, m,
             {slot_read(from), slot_write(dst)}, A);
    }
  };
  // The saved set of (l, m) back onto the device for its backward; returns the device slot.
  auto load_acts = [&](int l, int m, int32_t to) {
    int32_t src = acts[l][m];
    if (b.peek_tier(src) == Tier::device) return src;  // kept
    if (b.peek_tier(src) == Tier::storage) {
      const int32_t st = arstage[areads++ % 2];
      b.task(TaskKind::fetch, Resource::storage_read, "acts.read " + blk_tag(l, m), l, m,
             {slot_read(src), slot_write(st)}, A);
      src = st;
    }
    if (s.compute_reads_host) return src;  // consumed in place
    b.task(TaskKind::fetch, Resource::h2d, "acts.load " + blk_tag(l, m), l, m,
           {slot_read(src), slot_write(to)}, A);
    return to;
  };
  // The gradient leaves the device once; its sum of squares, then part 0's step (clipping
  // off), run on cpu_optim while compute goes on with earlier blocks.
  auto finish_block = [&](int l) {
    b.task(TaskKind::store, Resource::d2h, "grad.out " + blk_tag(l), l, -1,
           {slot_read(gacc[l % 2]), slot_write(ghost[l])}, G);
    add_grad_sumsq(b, l, ghost[l], G, c.sums);
    if (has_part0) {
      step(l, 0, tiers.params[l] == Tier::storage ? pwstage[l % 2] : pstore[l], false);
    }
  };
  auto zero_grad = [&](int l) {
    b.task(TaskKind::zero, Resource::compute, "grad.zero " + blk_tag(l), l, -1,
           {slot_write(gacc[l % 2])});
  };

  if (!s.iteration) {  // the flush: only the pending steps
    for (int l = 0; l < L; ++l) fetch_params(l, false);
    return b.take();
  }

  // ---- Forward (the last block: forward, loss and backward together) --------------------------
  add_iteration_start(b, c, s);
  fetch_params(0, true);
  emit_fetch();
  int k = 0;  // act.buf holding the current micro-batch's input
  for (int l = 0; l < L; ++l) {
    // Queued now so that the storage queues fetch block l+1 while block l computes; its h2d copy
    // goes after block l's last checkpoint load.
    if (l + 1 < L) fetch_params(l + 1, true);
    if (M == 1) emit_fetch();
    const bool last = l == L - 1;
    if (last) zero_grad(l);
    // Brings the input of the micro-batch at position i into act.buf[kk].
    auto prepare = [&](int i, int kk) {
      const int m = vertical_micro_batch(l, i, M);
      if (l == 0) {
        b.task(TaskKind::forward, Resource::compute, "embed.fwd mb." + std::to_string(m), -1, m,
               {slot_read(c.embed), slot_read(c.tokens_device), slot_write(abuf[kk])});
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
      if (i + 2 == M) emit_fetch();
      const int32_t in = abuf[k];
      const std::string t = blk_tag(l, m);
      if (!last) {
        // The saved set goes to its kept slot, or to a device buffer it is offloaded from.
        int32_t saved = -1;
        if (apol(l) == ActPolicy::keep) saved = acts[l][m];
        if (apol(l) == ActPolicy::host || apol(l) == ActPolicy::storage) {
          // Straight into its host slot or storage stage when compute reaches host memory.
          const int32_t dst = acts[l][m];
          saved = !s.compute_reads_host            ? aout[i % 2]
                  : b.peek_tier(dst) == Tier::host ? dst
                                                   : awstage[awrites++ % 2];
        }
        std::vector<SlotUse> uses = {slot_read(params_slot[l]), slot_read(in), slot_write(in)};
        if (saved >= 0) uses.push_back(slot_write(saved));
        b.task(TaskKind::forward, Resource::compute, "fwd " + t, l, m, uses, 0, s.block_fwd_flops);
        write_ckpt(l + 1, m, in);  // the output is the next block's input
        if (saved >= 0 && apol(l) != ActPolicy::keep) store_acts(l, m, saved);
      } else {
        b.task(TaskKind::forward, Resource::compute, "fwd " + t, l, m,
               {slot_read(params_slot[l]), slot_read(in), slot_write(last_out)}, 0,
               s.block_fwd_flops);
        b.task(TaskKind::loss, Resource::compute, "loss mb." + std::to_string(m), l, m,
               {slot_read(last_out), slot_read(c.embed), slot_read(c.tokens_device),
                slot_write(dact[m]), slot_read(c.embed_grad), slot_write(c.embed_grad),
                slot_write(c.losses)},
               0, s.head_flops);
        Task bwd{.kind = TaskKind::backward, .resource = Resource::compute, .label = "bwd " + t};
        bwd.block = l;
        bwd.micro_batch = m;
        bwd.uses = {slot_read(params_slot[l]), slot_read(in),          slot_read(dact[m]),
                    slot_write(dact[m]),       slot_read(gacc[l % 2]), slot_write(gacc[l % 2])};
        bwd.flops = s.block_bwd_flops;
        bwd.fused = true;
        b.task(std::move(bwd));
      }
      if (i + 1 < M) k = 1 - k;
    }
  }
  finish_block(L - 1);

  // ---- Backward, blocks L-2..0, each in its forward order (continuing the snake) --------------
  if (L >= 2) fetch_params(L - 2, true);
  emit_fetch();
  int j = 0;
  for (int l = L - 2; l >= 0; --l) {
    if (l >= 1) fetch_params(l - 1, true);
    zero_grad(l);
    const bool saved = apol(l) != ActPolicy::recompute;
    std::vector<int32_t> acts_in(2, -1);  // device slot of the saved set, per double buffer
    load_ckpt(l, vertical_micro_batch(l, 0, M), bin[j]);
    if (saved) acts_in[j] = load_acts(l, vertical_micro_batch(l, 0, M), ain.empty() ? -1 : ain[j]);
    if (M == 1) emit_fetch();
    for (int i = 0; i < M; ++i) {
      const int m = vertical_micro_batch(l, i, M);
      if (i + 1 < M) {
        const int next = vertical_micro_batch(l, i + 1, M);
        load_ckpt(l, next, bin[1 - j]);
        if (saved) acts_in[1 - j] = load_acts(l, next, ain.empty() ? -1 : ain[1 - j]);
      }
      if (i + 2 == M) emit_fetch();
      std::vector<SlotUse> uses = {slot_read(params_slot[l]), slot_read(bin[j]),
                                   slot_read(dact[m]),        slot_write(dact[m]),
                                   slot_read(gacc[l % 2]),    slot_write(gacc[l % 2])};
      // With the saved set there is nothing to recompute.
      if (saved) uses.push_back(slot_read(acts_in[j]));
      b.task(TaskKind::backward, Resource::compute, "bwd " + blk_tag(l, m), l, m, uses, 0,
             saved ? s.block_bwd_flops : s.block_fwd_flops + s.block_bwd_flops);
      j = 1 - j;
    }
    finish_block(l);
  }
  for (int m = 0; m < M; ++m) {
    b.task(TaskKind::backward, Resource::compute, "embed.bwd mb." + std::to_string(m), -1, m,
           {slot_read(dact[m]), slot_read(c.tokens_device), slot_read(c.embed_grad),
            slot_write(c.embed_grad)});
  }
  add_iteration_end(b, c, s, [] {});  // block steps: part 0 above, part 1 in the next plan
  return b.take();
}

}  // namespace strata
