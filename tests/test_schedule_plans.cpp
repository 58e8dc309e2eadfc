// Plan generator tests (CTest names plan_schedules.*): every horizontal and vertical plan over a
// grid of shapes and placements passes check_plan, and the plans have the structure that makes
// the schedules what they are (fetch counts, storage traffic, snake order, pinned checkpoints,
// gradient traffic).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sched/happens_before.h"
#include "sched/plan_builder.h"
#include "sched/plan_checker.h"
#include "sched/schedule_horizontal.h"
#include "sched/schedule_spec.h"
#include "sched/schedule_vertical.h"
#include "sched/slot_names.h"

namespace strata {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

ScheduleSpec spec(int L, int M, Placement params, Placement optim, Placement ckpt) {
  ScheduleSpec s;
  s.blocks = L;
  s.micro_batches = M;
  s.block_elems = 2 * kMiB;  // f32 params: 4 bytes per element
  s.block_param_bytes = 8 * kMiB;
  s.block_grad_bytes = 8 * kMiB;
  s.block_optim_bytes = 24 * kMiB;
  s.checkpoint_bytes = kMiB;
  s.embed_param_bytes = 20 * kMiB;  // 2.5 blocks of elements: three chunks, the last short
  s.embed_elems = s.embed_param_bytes / 4;
  s.embed_optim_bytes = 3 * s.embed_param_bytes;
  s.block_fwd_flops = 1e9;
  s.block_bwd_flops = 2e9;
  s.params = params;
  s.optim = optim;
  s.checkpoints = ckpt;
  return s;
}

// Tasks of `kind`, per block.
std::map<int, int> count_per_block(const Plan& p, TaskKind kind) {
  std::map<int, int> n;
  for (const Task& t : p.tasks) {
    if (t.kind == kind) ++n[t.block];
  }
  return n;
}

// Whether a gradient collective `sum` orders task `other`: the same block and, for a
// per-micro-batch collective (shard_grads, or a device scatter in horizontal), the same
// micro-batch or none.
bool summed_with(const Task& sum, const Task& other) {
  if (other.block != sum.block) return false;
  return sum.micro_batch < 0 || other.micro_batch < 0 || other.micro_batch == sum.micro_batch;
}

// The checks every generated plan must pass: check_plan, the task signatures, and for a plan
// whose compute does not read host memory the tiers (Note [Where a task's slots live]).
Status check_all(const Plan& p, bool compute_reads_host = false) {
  STRATA_RETURN_IF_ERROR(check_task_signatures(p));
  if (!compute_reads_host) STRATA_RETURN_IF_ERROR(check_task_tiers(p));
  return check_plan(p, {});
}

const std::vector<int> kBlocks = {1, 2, 3, 5}, kMicro = {1, 2, 3, 4, 8};
const std::vector<Placement> kOff = {Placement::host, Placement::storage};

TEST(plan_schedules, GridPassesChecker) {
  for (int L : kBlocks) {
    for (int M : kMicro) {
      for (Placement pp : kOff) {
        for (Placement op : kOff) {
          for (Placement cp : kOff) {
            for (Placement gp : kOff) {
              ScheduleSpec s = spec(L, M, pp, op, cp);
              s.grads = gp;
              s.embed_optim = op;  // on storage: the chunked embed step
              const std::string what =
                  "L=" + std::to_string(L) + " M=" + std::to_string(M) +
                  " params=" + std::to_string(int(pp)) + " optim=" + std::to_string(int(op)) +
                  " ckpt=" + std::to_string(int(cp)) + " grads=" + std::to_string(int(gp));
              Status h = check_all(make_horizontal_plan(s));
              EXPECT_TRUE(h.ok()) << "horizontal " << what << ": " << h.to_string();
              Status v = check_all(make_vertical_plan(s));
              EXPECT_TRUE(v.ok()) << "vertical " << what << ": " << v.to_string();
            }
          }
        }
      }
    }
  }
}

// Whether `from` happens before `to` (Note [Happens-before in plans]): a path of direct edges.
bool happens_before(const HappensBefore& hb, int32_t from, int32_t to) {
  std::vector<bool> seen(static_cast<size_t>(hb.task_count()), false);
  std::vector<int32_t> todo = {from};
  while (!todo.empty()) {
    const int32_t t = todo.back();
    todo.pop_back();
    if (t == to) return true;
    for (int32_t s : hb.successors(t)) {
      if (!seen[static_cast<size_t>(s)]) {
        seen[static_cast<size_t>(s)] = true;
        todo.push_back(s);
      }
    }
  }
  return false;
}

// Note [Data parallel ranks]: with several ranks every block's gradient, and the embed group's,
// is summed over them exactly once, on the net queue, after the last task that adds to it and
// before anything reads it for the step: its sums of squares, AdamW, its write to storage. With
// one rank no collective is planned.
TEST(plan_schedules, RanksSumEveryGradientOnceBeforeItIsRead) {
  for (int ranks : {1, 2}) {
    for (Placement place : kOff) {
      for (bool vertical : {false, true}) {
        ScheduleSpec s = spec(3, 2, place, place, place);
        s.grads = place;
        s.embed_optim = place;
        s.ranks = ranks;
        s.shard_grads = !vertical && ranks > 1;           // as the trainer sets it
        if (vertical) s.split_elems = s.block_elems / 2;  // part 1 waits for the next iteration
        const Plan p = vertical ? make_vertical_plan(s) : make_horizontal_plan(s);
        const std::string what = std::string(vertical ? "vertical" : "horizontal") +
                                 " ranks=" + std::to_string(ranks) +
                                 " placement=" + std::to_string(int(place));
        ASSERT_TRUE(check_all(p).ok()) << what << ": " << check_all(p).to_string();
        // Note [Sharded optimizer state]: the blocks' gradients reduce-scattered, the embed
        // group's all-reduced.
        const std::map<int, int> reduces = count_per_block(p, TaskKind::grad_allreduce);
        const std::map<int, int> scatters = count_per_block(p, TaskKind::grad_reduce_scatter);
        if (ranks == 1) {
          EXPECT_TRUE(reduces.empty()) << what;
          EXPECT_TRUE(scatters.empty()) << what;
          continue;
        }
        EXPECT_EQ(reduces, (std::map<int, int>{{-1, 1}})) << what;
        // Horizontal keeps a shard of the gradient: each micro-batch's is scattered as it comes.
        const int per_block = vertical ? 1 : s.micro_batches;
        EXPECT_EQ(scatters, (std::map<int, int>{{0, per_block}, {1, per_block}, {2, per_block}}))
            << what;
        auto hb = happens_before_edges(p);
        ASSERT_TRUE(hb.ok());
        for (int32_t r = 0; r < static_cast<int32_t>(p.tasks.size()); ++r) {
          const Task& reduce = p.tasks[static_cast<size_t>(r)];
          if (reduce.kind != TaskKind::grad_allreduce &&
              reduce.kind != TaskKind::grad_reduce_scatter) {
            continue;
          }
          EXPECT_EQ(reduce.resource(), Resource::net);
          EXPECT_EQ(reduce.bytes, reduce.block >= 0 ? s.block_grad_bytes : s.embed_param_bytes);
          for (int32_t t = 0; t < static_cast<int32_t>(p.tasks.size()); ++t) {
            const Task& other = p.tasks[static_cast<size_t>(t)];
            if (!summed_with(reduce, other)) continue;
            // A micro-batch's scatter comes before that micro-batch's accumulation into the
            // kept shard; a whole gradient's after every accumulation.
            const bool per_micro_batch = reduce.micro_batch >= 0;
            const bool accumulates = other.kind == TaskKind::grad_accumulate;
            const bool adds =
                other.kind == TaskKind::grad_out || (accumulates && !per_micro_batch) ||
                other.kind == TaskKind::block_backward || other.kind == TaskKind::embed_backward;
            // (Horizontal writes partial sums to storage after each earlier micro-batch.)
            const bool last = other.micro_batch < 0 || other.micro_batch == s.micro_batches - 1;
            const bool reads =
                other.kind == TaskKind::grad_sumsq || other.kind == TaskKind::block_step ||
                other.kind == TaskKind::embed_step ||
                (other.kind == TaskKind::grad_write && last) || (accumulates && per_micro_batch);
            if (adds) {
              EXPECT_TRUE(happens_before(*hb, t, r))
                  << what << ": " << p.describe(t) << " after " << p.describe(r);
            }
            if (reads) {
              EXPECT_TRUE(happens_before(*hb, r, t))
                  << what << ": " << p.describe(t) << " before " << p.describe(r);
            }
          }
        }
      }
    }
  }
}

// ScheduleSpec::device_collectives (Note [ZeRO-3 on the device]), 3 ranks: each block's gradient
// is reduce-scattered in its device slot, once per block (vertical) or per micro-batch
// (horizontal), after the backward that adds to it and before it leaves the device or anything
// reads it, and only this rank's shard of it leaves; no block's gradient is scattered on the
// host; the embed group's is all-reduced in its device slot before it leaves. Each fetch copies
// this rank's shard of the block's params and gathers them on the device, part by part, before
// any compute reads them; the host gathers nothing. The device slots pass the tier rule of a
// discrete device.
TEST(plan_schedules, DeviceCollectivesMoveOnlyThisRanksShards) {
  for (Placement place : kOff) {
    for (bool vertical : {false, true}) {
      ScheduleSpec s = spec(3, 2, place, place, place);
      s.grads = place;
      s.embed_optim = place;
      s.ranks = 3;
      s.rank = 1;
      s.shard_grads = !vertical;
      s.device_collectives = true;
      if (vertical) s.split_elems = s.block_elems / 2;
      const Plan p = vertical ? make_vertical_plan(s) : make_horizontal_plan(s);
      const std::string what = std::string(vertical ? "vertical" : "horizontal") +
                               " placement=" + std::to_string(int(place));
      ASSERT_TRUE(check_all(p).ok()) << what << ": " << check_all(p).to_string();  // tiers too
      for (TaskKind host : {TaskKind::grad_reduce_scatter, TaskKind::grad_allreduce,
                            TaskKind::param_allgather, TaskKind::param_gather}) {
        EXPECT_TRUE(count_per_block(p, host).empty()) << what << ": " << task_kind_name(host);
      }
      EXPECT_EQ(count_per_block(p, TaskKind::grad_allreduce_device), (std::map<int, int>{{-1, 1}}))
          << what;
      const int per_block = vertical ? 1 : s.micro_batches;
      EXPECT_EQ(count_per_block(p, TaskKind::grad_reduce_scatter_device),
                (std::map<int, int>{{0, per_block}, {1, per_block}, {2, per_block}}))
          << what;
      // This rank's shard of each part: a third of the block, give or take an element.
      std::map<std::pair<int, int>, int64_t> grad_out;  // (block, micro-batch) -> bytes
      std::map<int, int64_t> fetched;                   // block -> bytes, every fetch
      for (const Task& t : p.tasks) {
        if (t.block < 0) continue;
        if (t.kind == TaskKind::grad_out) grad_out[{t.block, t.micro_batch}] += t.bytes;
        if (t.kind == TaskKind::params_fetch) fetched[t.block] += t.bytes;
      }
      for (const auto& [key, bytes] : grad_out) {
        EXPECT_NEAR(static_cast<double>(bytes), s.block_grad_bytes / 3.0, 8.0) << what;
      }
      EXPECT_EQ(grad_out.size(), static_cast<size_t>(3 * per_block)) << what;
      // Each fetch is followed by one gather per optimizer part.
      const std::map<int, int> gathers = count_per_block(p, TaskKind::param_allgather_device);
      for (const auto& [block, bytes] : fetched) {
        const int fetches = gathers.count(block) ? gathers.at(block) / (vertical ? 2 : 1) : 0;
        EXPECT_GT(fetches, 0) << what;
        EXPECT_NEAR(static_cast<double>(bytes), fetches * s.block_param_bytes / 3.0, 8.0 * fetches)
            << what << " block " << block;
      }
      auto hb = happens_before_edges(p);
      ASSERT_TRUE(hb.ok());
      for (int32_t r = 0; r < static_cast<int32_t>(p.tasks.size()); ++r) {
        const Task& net = p.tasks[static_cast<size_t>(r)];
        if (net.resource() != Resource::net || net.block < 0) continue;
        const bool gather = net.kind == TaskKind::param_allgather_device;
        const Role role = gather ? Role::params : Role::grad;
        EXPECT_EQ(p.slots[static_cast<size_t>(slot_of(net, role))].tier, Tier::device) << what;
        if (gather) continue;  // checked below, from the computes that read it
        for (int32_t t = 0; t < static_cast<int32_t>(p.tasks.size()); ++t) {
          const Task& other = p.tasks[static_cast<size_t>(t)];
          if (!summed_with(net, other)) continue;
          if (other.kind == TaskKind::block_backward) {
            EXPECT_TRUE(happens_before(*hb, t, r))
                << what << ": " << p.describe(t) << " after " << p.describe(r);
          }
          if (other.kind == TaskKind::grad_out || other.kind == TaskKind::grad_sumsq ||
              other.kind == TaskKind::block_step) {
            EXPECT_TRUE(happens_before(*hb, r, t))
                << what << ": " << p.describe(t) << " before " << p.describe(r);
          }
        }
      }
      // Every compute that reads a block's params reads them gathered: some gather of that block
      // into the slot it reads comes before it, with no fetch into that slot in between.
      for (int32_t t = 0; t < static_cast<int32_t>(p.tasks.size()); ++t) {
        const Task& c = p.tasks[static_cast<size_t>(t)];
        if (c.kind != TaskKind::block_forward && c.kind != TaskKind::block_backward) continue;
        const int32_t slot = slot_of(c, Role::params);
        int32_t last_gather = -1, last_fetch = -1;
        for (int32_t g = 0; g < t; ++g) {
          const Task& x = p.tasks[static_cast<size_t>(g)];
          if (x.kind == TaskKind::param_allgather_device && slot_of(x, Role::params) == slot &&
              x.block == c.block) {
            last_gather = g;
          }
          if (x.kind == TaskKind::params_fetch && slot_of(x, Role::dst) == slot) last_fetch = g;
        }
        EXPECT_GT(last_gather, last_fetch) << what << ": " << p.describe(t);
        if (last_gather >= 0) {
          EXPECT_TRUE(happens_before(*hb, last_gather, t)) << what;
        }
      }
    }
  }
}

// Note [Sharded optimizer state]: the ranks' shards of a part are contiguous, in rank order,
// cover it exactly once, and the stride is the longest shard; one rank owns the whole part.
TEST(plan_schedules, PartShardsCoverEachPartOnce) {
  const int64_t n = 1003, split = 400;
  for (int ranks : {1, 2, 3, 7}) {
    for (int32_t part : {-1, 0, 1}) {
      const PartShard whole = part_shard(n, split, part, 1, 0);
      EXPECT_EQ(whole.begin, whole.part_begin);
      EXPECT_EQ(whole.end, whole.part_end);
      EXPECT_EQ(whole.part_begin, part == 1 ? split : 0);
      EXPECT_EQ(whole.part_end, part == 0 ? split : n);
      int64_t at = whole.part_begin, longest = 0;
      for (int r = 0; r < ranks; ++r) {
        const PartShard sh = part_shard(n, split, part, ranks, r);
        EXPECT_EQ(sh.begin, at) << "ranks " << ranks << " part " << part << " rank " << r;
        EXPECT_GE(sh.end, sh.begin);
        longest = std::max(longest, sh.end - sh.begin);
        at = sh.end;
      }
      EXPECT_EQ(at, whole.part_end);
      EXPECT_EQ(part_shard(n, split, part, ranks, ranks - 1).stride, longest);
    }
  }
}

// Note [Shard ranges in a store] (a kept gradient, f32; working params, f32 or bf16): each rank
// keeps (stage side) what its steps read of a part, its optimizer shard, widened to whole I/O
// units of bytes: aligned, inside the part, whole units unless it ends where the part does;
// packed in its store without overlap; all ranks together hardly more than the part. One rank
// keeps the part's range at its own offset, in a store of the whole block's.
TEST(plan_schedules, ShardStoreRangesCoverWhatEachRankSteps) {
  ScheduleSpec s;
  for (const auto [width, io_f32] : {std::pair<int64_t, int64_t>{4, 1}, {4, 64}, {2, 1}, {2, 64}}) {
    s.grad_io_elems = io_f32;                                       // f32 elements of one I/O unit
    const int64_t unit = std::max<int64_t>(io_f32 * 4 / width, 1);  // elements of one
    s.block_elems = 1003;
    const int64_t block_bytes = width * s.block_elems;
    // The split is a multiple of the unit, or the whole block (alpha 0).
    for (int64_t split : {int64_t{0}, int64_t{384}, s.block_elems}) {
      s.split_elems = split;
      for (int ranks : {1, 2, 3, 7}) {
        s.ranks = ranks;
        for (int32_t part : {-1, 0, 1}) {
          const int64_t lo = part == 1 ? split : 0, hi = part == 0 ? split : s.block_elems;
          const std::string what = "width " + std::to_string(width) + " unit " +
                                   std::to_string(unit) + " split " + std::to_string(split) +
                                   " ranks " + std::to_string(ranks) + " part " +
                                   std::to_string(part);
          int64_t kept_by_all = 0;
          for (int r = 0; r < ranks; ++r) {
            s.rank = r;
            const int64_t store_bytes = shard_store_bytes(s, block_bytes);
            std::vector<char> stored(static_cast<size_t>(store_bytes), 0);
            std::vector<char> kept(static_cast<size_t>(s.block_elems), 0);
            for (const StoreRange& g : shard_store_ranges(s, block_bytes, part)) {
              const int64_t begin = g.stage_at / width, end = (g.stage_at + g.bytes) / width;
              ASSERT_EQ(g.stage_at % width, 0) << what;
              ASSERT_EQ(g.bytes % width, 0) << what;
              ASSERT_LE(g.store_at + g.bytes, store_bytes) << what;
              EXPECT_EQ(begin % unit, 0) << what;
              EXPECT_EQ(g.store_at % (width * unit), 0) << what;
              EXPECT_TRUE((end - begin) % unit == 0 || end == split || end == s.block_elems)
                  << what;
              EXPECT_GE(begin, lo) << what;
              EXPECT_LE(end, hi) << what;
              for (int64_t b = g.store_at; b < g.store_at + g.bytes; ++b) {
                EXPECT_EQ(stored[static_cast<size_t>(b)]++, 0) << what << " store byte " << b;
              }
              for (int64_t e = begin; e < end; ++e) kept[static_cast<size_t>(e)] = 1;
              if (ranks == 1) {
                EXPECT_EQ(g.store_at, g.stage_at) << what;
              }
              kept_by_all += end - begin;
            }
            for (int32_t q : {0, 1}) {
              if (part >= 0 && q != part) continue;
              const PartShard sh = part_shard(s.block_elems, split, q, ranks, r);
              for (int64_t e = sh.begin; e < sh.end; ++e) {
                EXPECT_EQ(kept[static_cast<size_t>(e)], 1)
                    << what << " rank " << r << " elem " << e;
              }
            }
          }
          EXPECT_LE(kept_by_all, hi - lo + 2 * 2 * unit * ranks) << what;
          if (io_f32 == 1 && width == 4) {
            EXPECT_EQ(kept_by_all, hi - lo) << what;
          }
        }
        s.rank = 0;
        if (ranks == 1) {
          EXPECT_EQ(shard_store_bytes(s, block_bytes), block_bytes);
        }
      }
    }
  }
}

// Note [Sharded optimizer state]: with several ranks each optimizer part's state slot holds one
// shard (the longest, rank 0's), and the blocks' sums of squares are summed over the ranks once,
// after every sum and before the norm. Note [Sharded working params]: a block's params store
// holds this rank's ranges; in host memory a step writes its shard there, with no collective,
// and every fetch copies from a stage the block was gathered into from the store (one
// param_gather); on storage a step writes only its shard's ranges and is gathered only when the
// plan fetches what it wrote, and every fetch is preceded by the gather of each part of the
// block in the stage it copies from.
TEST(plan_schedules, ShardedStepsGatherTheirParamsAndSumTheNormOnce) {
  for (Placement place : kOff) {
    for (int variant = 0; variant < 3; ++variant) {
      const bool vertical = variant > 0;
      ScheduleSpec s = spec(3, 2, place, place, place);
      s.grads = place;
      s.ranks = 3;
      s.pending_steps = variant == 2;  // part 1's steps before the fetches of the forward
      s.shard_grads = !vertical;
      s.embed_optim = place;  // on storage: its step in chunks of the shard-sized stage
      if (vertical) s.split_elems = s.block_elems / 2 + 1;
      const Plan p = vertical ? make_vertical_plan(s) : make_horizontal_plan(s);
      const std::string what = std::string(vertical ? "vertical" : "horizontal") +
                               " pending=" + std::to_string(s.pending_steps) +
                               " placement=" + std::to_string(int(place));
      ASSERT_TRUE(check_all(p).ok()) << what << ": " << check_all(p).to_string();
      for (int32_t part : vertical ? std::vector<int32_t>{0, 1} : std::vector<int32_t>{-1}) {
        const int64_t len = part == 0   ? s.split_elems
                            : part == 1 ? s.block_elems - s.split_elems
                                        : s.block_elems;
        const int64_t bytes = 12 * ((len + 2) / 3);  // (3, ceil(len / 3)) f32
        EXPECT_EQ(optim_part_bytes(s, part), bytes) << what << " part " << part;
        const std::string name =
            vertical ? slot_names::optim_store(0, part) : slot_names::optim_store(0);
        bool found = false;
        for (const Slot& slot : p.slots) {
          if (slot.name != name) continue;
          found = true;
          EXPECT_EQ(slot.bytes, bytes) << what << " " << name;
        }
        EXPECT_TRUE(found) << what << " " << name;
      }
      // The kept gradient: horizontal's a shard (the longest); vertical's whole in host memory,
      // on storage the longest shard of each part (Note [Sharded kept gradient]).
      const int64_t split = vertical ? s.split_elems : 0;
      const int64_t kept = !vertical ? 4 * ((s.block_elems + 2) / 3)
                           : place == Placement::storage
                               ? 4 * ((split + 2) / 3 + (s.block_elems - split + 2) / 3)
                               : s.block_grad_bytes;
      if (!vertical) {
        EXPECT_EQ(kept_grad_bytes(s), kept) << what;
      }
      if (vertical && place == Placement::storage) {
        EXPECT_EQ(vertical_kept_grad_bytes(s), kept) << what;
      }
      for (const Slot& slot : p.slots) {
        if (slot.name == slot_names::grad_store(0)) {
          EXPECT_EQ(slot.bytes, kept) << what;
        }
        // Note [Sharded working params]: rank 0's ranges of both parts, about a third.
        if (slot.name == slot_names::params_store(0)) {
          EXPECT_EQ(slot.bytes, shard_store_bytes(s, s.block_param_bytes)) << what;
          EXPECT_LE(slot.bytes, s.block_param_bytes / 3 + 2 * 2 * 4096) << what;
        }
      }
      // Note [Optimizer stage size]: the stage holds the longest shard's state, not a block's.
      const int64_t longest = vertical ? std::max((split + 2) / 3, (s.block_elems - split + 2) / 3)
                                       : (s.block_elems + 2) / 3;
      int stages = 0;
      for (const Slot& slot : p.slots) {
        if (slot.name != slot_names::kOptimStage.at(0) &&
            slot.name != slot_names::kOptimStage.at(1)) {
          continue;
        }
        ++stages;
        EXPECT_EQ(slot.bytes, 12 * longest) << what << " " << slot.name;
      }
      EXPECT_EQ(stages, place == Placement::storage ? 2 : 0) << what;
      if (vertical && place == Placement::storage) {  // rank 0 writes its shard of part 1 only
        int64_t written = 0;
        for (const Task& t : p.tasks) written += t.kind == TaskKind::grad_write ? t.bytes : 0;
        EXPECT_EQ(written, s.blocks * 4 * ((s.block_elems - split + 2) / 3)) << what;
      }
      auto hb = happens_before_edges(p);
      ASSERT_TRUE(hb.ok());
      int norms = 0;
      for (int32_t i = 0; i < static_cast<int32_t>(p.tasks.size()); ++i) {
        const Task& t = p.tasks[static_cast<size_t>(i)];
        if (t.kind == TaskKind::norm_allreduce) {
          ++norms;
          for (int32_t j = 0; j < static_cast<int32_t>(p.tasks.size()); ++j) {
            const TaskKind k = p.tasks[static_cast<size_t>(j)].kind;
            if (k == TaskKind::grad_sumsq) {
              EXPECT_TRUE(happens_before(*hb, j, i)) << what;
            }
            if (k == TaskKind::grad_norm) {
              EXPECT_TRUE(happens_before(*hb, i, j)) << what;
            }
          }
        }
        if (t.kind == TaskKind::params_fetch && t.block >= 0) {
          const int32_t stage = t.uses.at(0).slot;
          const std::string& stage_name = p.slots.at(static_cast<size_t>(stage)).name;
          EXPECT_TRUE(stage_name == slot_names::kParamsStage.at(0) ||
                      stage_name == slot_names::kParamsStage.at(1))
              << what << ": " << p.describe(i);
          if (place == Placement::host) {
            bool gathered = false;
            for (int32_t j = 0; j < i; ++j) {
              const Task& g = p.tasks[static_cast<size_t>(j)];
              gathered |= g.kind == TaskKind::param_gather && g.block == t.block && g.part == -1 &&
                          g.uses.at(1).slot == stage &&
                          p.slots.at(static_cast<size_t>(g.uses.at(0).slot)).name ==
                              slot_names::params_store(t.block) &&
                          g.resource() == Resource::net && happens_before(*hb, j, i);
            }
            EXPECT_TRUE(gathered) << what << ": before " << p.describe(i);
          }
          for (int32_t q :
               place == Placement::host ? std::vector<int32_t>{} : block_param_parts(s)) {
            bool gathered = false;
            for (int32_t j = 0; j < i; ++j) {
              const Task& g = p.tasks[static_cast<size_t>(j)];
              gathered |= g.kind == TaskKind::param_allgather && g.block == t.block &&
                          g.part == q && g.uses.at(0).slot == stage && happens_before(*hb, j, i);
            }
            EXPECT_TRUE(gathered) << what << ": part " << q << " before " << p.describe(i);
          }
        }
        if (t.kind != TaskKind::block_step) continue;
        int32_t params_out = -1;
        for (const SlotUse& u : t.uses) {
          if (u.role == Role::params) params_out = u.slot;
        }
        const std::string& out_name = p.slots.at(static_cast<size_t>(params_out)).name;
        const bool fetched_stage = out_name == slot_names::kParamsStage.at(0) ||
                                   out_name == slot_names::kParamsStage.at(1);
        int gathers = 0;
        int64_t written = 0;
        for (int32_t j = i + 1; j < static_cast<int32_t>(p.tasks.size()); ++j) {
          const Task& g = p.tasks[static_cast<size_t>(j)];
          if (g.kind == TaskKind::params_fetch && g.block == t.block) break;  // the next use
          if (g.block != t.block || g.part != t.part) continue;
          if (g.kind == TaskKind::param_allgather && g.uses.at(0).slot == params_out) {
            ++gathers;
            EXPECT_EQ(g.resource(), Resource::net);
            EXPECT_TRUE(happens_before(*hb, i, j)) << what << ": " << p.describe(j);
          }
          if (g.kind == TaskKind::params_write && g.uses.at(0).slot == params_out) {
            written += g.bytes;
          }
        }
        if (place == Placement::host) {  // into the store itself
          EXPECT_EQ(out_name, slot_names::params_store(t.block)) << what << ": " << p.describe(i);
          EXPECT_EQ(gathers, 0) << what << ": " << p.describe(i);
          EXPECT_EQ(written, 0) << what << ": " << p.describe(i);
        } else {
          EXPECT_EQ(gathers, fetched_stage ? 1 : 0) << what << ": " << p.describe(i);
          int64_t shard = 0;  // rank 0's ranges of the part
          for (const StoreRange& r : shard_store_ranges(s, s.block_param_bytes, t.part)) {
            shard += r.bytes;
          }
          EXPECT_EQ(written, shard) << what << ": " << p.describe(i);
          EXPECT_LT(written, part_bytes(s.block_param_bytes, s.block_elems, s.split_elems, t.part))
              << what << ": " << p.describe(i);
        }
      }
      EXPECT_EQ(norms, 1) << what;
    }
  }
}

// Every kind of state on storage for some blocks and on host for the others, in different
// proportions per kind.
ScheduleSpec mixed_spec(int L, int M) {
  ScheduleSpec s = spec(L, M, Placement::storage, Placement::storage, Placement::storage);
  s.params_at = placement_by_fraction(L, 0.5);
  s.optim_at = placement_by_fraction(L, 0.34);
  s.checkpoints_at = placement_by_fraction(L, 0.67);
  s.grads_at = placement_by_fraction(L, 0.5);
  return s;
}

// The vertical plan's variants (Note [Optimizer split]): the split (all deferred, half, none),
// the first iteration, the steady one with pending part-1 steps, and the flush; over the grid
// with per-block mixed placements too.
TEST(plan_schedules, VerticalVariantsPassChecker) {
  for (int L : kBlocks) {
    for (int M : kMicro) {
      ScheduleSpec s = mixed_spec(L, M);
      for (int64_t split : {int64_t{0}, s.block_elems / 2, s.block_elems}) {
        for (auto [pending, iteration] : {std::pair{false, true}, {true, true}, {true, false}}) {
          s.split_elems = split;
          s.pending_steps = pending;
          s.iteration = iteration;
          // Saved activations: per block keep / host / storage / recompute, cycling.
          s.acts_at.clear();
          for (int l = 0; l < L; ++l) s.acts_at.push_back(static_cast<ActPolicy>((l + M) % 4));
          s.acts_bytes = 3 * kMiB;
          s.compute_reads_host = (L + M) % 2 == 0;  // both ways of moving saved sets
          Status v = check_all(make_vertical_plan(s), s.compute_reads_host);
          EXPECT_TRUE(v.ok()) << "L=" << L << " M=" << M << " split=" << split
                              << " pending=" << pending << " iteration=" << iteration << ": "
                              << v.to_string();
        }
      }
      Status h = check_all(make_horizontal_plan(s), s.compute_reads_host);
      EXPECT_TRUE(h.ok()) << "horizontal mixed L=" << L << " M=" << M << ": " << h.to_string();
    }
  }
}

// Note [Where a task's slots live]: the CPU device's plan that produces saved sets in place in
// host slots breaks the discrete rule, named in one line; the same plan for a discrete device
// keeps it. A hand-made compute task on a host slot is refused too.
TEST(plan_schedules, TierRuleSeparatesDiscretePlans) {
  ScheduleSpec s = mixed_spec(3, 2);
  s.acts_at = {ActPolicy::host, ActPolicy::storage, ActPolicy::host};
  s.acts_bytes = 3 * kMiB;
  s.compute_reads_host = true;
  Status in_place = check_task_tiers(make_vertical_plan(s));
  ASSERT_FALSE(in_place.ok());
  EXPECT_NE(in_place.message().find("a compute task reaches only device memory"), std::string::npos)
      << in_place.message();
  s.compute_reads_host = false;
  EXPECT_TRUE(check_task_tiers(make_vertical_plan(s)).ok());

  Plan p;
  const int32_t host = p.add_slot("x.host", Tier::host, 64, true);
  const int32_t dev = p.add_slot("x.dev", Tier::device, 64);
  Task t;
  t.kind = TaskKind::grad_zero;
  t.label = "zero";
  t.uses = {slot_write(host, Role::grad)};
  p.add_task(t);
  Status bad = check_task_tiers(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("'x.host' (host) as 'grad'"), std::string::npos) << bad.message();
  p.tasks[0].uses = {slot_write(dev, Role::grad)};
  EXPECT_TRUE(check_task_tiers(p).ok());
}

// With speculation (Note [Speculative steps]): every plan a run may choose between, for each
// split with a part 0: what the previous iteration left (nothing, part 1, both parts), whether
// this one speculates or defers part 0, the flushes and the repair; mixed placements.
TEST(plan_schedules, SpeculativeVariantsPassChecker) {
  for (int L : kBlocks) {
    for (int M : kMicro) {
      ScheduleSpec s = mixed_spec(L, M);
      for (int64_t split : {s.block_elems / 2, s.block_elems}) {
        for (int pending = 0; pending < 3; ++pending) {
          for (int kind = 0; kind < 4; ++kind) {  // speculate, defer, flush, repair
            s.split_elems = split;
            s.pending_steps = pending > 0;
            s.pending_part0 = pending == 2;
            s.iteration = kind < 2;
            s.speculative = kind == 0;
            s.defer_part0 = kind == 1;
            s.repair = kind == 3;
            if (kind >= 2 && pending == 0 && !s.repair) continue;  // nothing to flush
            Status v = check_all(make_vertical_plan(s));
            EXPECT_TRUE(v.ok()) << "L=" << L << " M=" << M << " split=" << split
                                << " pending=" << pending << " kind=" << kind << ": "
                                << v.to_string();
          }
        }
      }
    }
  }
}

// Happens-before (Note [Happens-before in plans]): deps and queue order, transitively. False
// for a plan whose edges are not indices (check_plan rejects those).
bool happens_before(const Plan& p, int32_t a, int32_t b) {
  const auto edges = happens_before_edges(p);
  if (!edges.ok()) return false;
  std::vector<bool> seen(p.tasks.size(), false);
  std::vector<int32_t> stack = {a};
  while (!stack.empty()) {
    const int32_t x = stack.back();
    stack.pop_back();
    for (int32_t y : edges.value().successors(x)) {
      if (y == b) return true;
      if (!seen[static_cast<size_t>(y)]) {
        seen[static_cast<size_t>(y)] = true;
        stack.push_back(y);
      }
    }
  }
  return false;
}

// The first task of `kind` about `tag` (block, micro-batch, part), or -1.
int32_t find_task(const Plan& p, TaskKind kind, TaskTag tag = {}) {
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    const Task& t = p.tasks[i];
    if (t.kind == kind && t.block == tag.block && t.micro_batch == tag.micro_batch &&
        t.part == tag.part) {
      return static_cast<int32_t>(i);
    }
  }
  return -1;
}

// No stale weights: in the steady vertical plan every forward of block l happens after the
// pending step of block l (part 1), and every part-0 step after the block's last backward; the
// horizontal plan steps only after the global norm; the deferred steps read the norm too.
TEST(plan_schedules, NoStaleWeightsAndStepsSeeTheNorm) {
  for (int L : {2, 3, 5}) {
    for (int M : {1, 3, 4}) {
      for (Placement pp : kOff) {
        ScheduleSpec s = spec(L, M, pp, Placement::storage, Placement::host);
        s.split_elems = s.block_elems / 2;
        s.pending_steps = true;
        const Plan v = make_vertical_plan(s);
        const int32_t norm = find_task(v, TaskKind::grad_norm);
        ASSERT_GE(norm, 0);
        for (int l = 0; l < L; ++l) {
          const int32_t p1 = find_task(v, TaskKind::block_step, {.block = l, .part = 1});
          const int32_t p0 = find_task(v, TaskKind::block_step, {.block = l, .part = 0});
          ASSERT_GE(p1, 0);
          ASSERT_GE(p0, 0);
          for (int m = 0; m < M; ++m) {
            const TaskTag tag{.block = l, .micro_batch = m};
            const int32_t fwd = find_task(v, TaskKind::block_forward, tag);
            const int32_t bwd = find_task(v, TaskKind::block_backward, tag);
            const std::string what = task_label(TaskKind::block_forward, tag);
            EXPECT_TRUE(happens_before(v, p1, fwd)) << "stale weights: " << what;
            EXPECT_TRUE(happens_before(v, bwd, p0)) << "step before its gradient: " << what;
          }
          // Part 1 steps last iteration's gradient: before this iteration's norm overwrites the
          // clip factor it reads.
          EXPECT_TRUE(happens_before(v, p1, norm)) << "blk." << l;
        }
        const Plan h = make_horizontal_plan(s);
        const int32_t hnorm = find_task(h, TaskKind::grad_norm);
        for (int l = 0; l < L; ++l) {
          EXPECT_TRUE(happens_before(h, hnorm, find_task(h, TaskKind::block_step, {.block = l})));
        }
        EXPECT_TRUE(happens_before(h, hnorm, find_task(h, TaskKind::embed_step)));
      }
    }
  }
}

// With a pending part-1 step the forward fetch reads only part 0's range of the params from
// storage (part 1 comes straight from the optimizer); the part-1 step reads alpha of the state.
TEST(plan_schedules, PendingStepForwardsParamsToTheFetch) {
  ScheduleSpec s = spec(3, 2, Placement::storage, Placement::storage, Placement::host);
  s.split_elems = s.block_elems / 4;  // part 0: a quarter, stepped in backward
  s.pending_steps = true;
  const Plan v = make_vertical_plan(s);
  for (int l = 0; l < 3; ++l) {
    const auto task = [&](TaskKind kind, int part) -> const Task& {
      const int32_t i = find_task(v, kind, {.block = l, .part = part});
      EXPECT_GE(i, 0) << task_kind_name(kind) << " blk." << l << " p" << part;
      return v.tasks[static_cast<size_t>(std::max(i, 0))];
    };
    const Task& r = task(TaskKind::params_read, 0);
    EXPECT_EQ(r.bytes, s.block_param_bytes / 4);
    const Task& o = task(TaskKind::optim_read, 1);
    EXPECT_EQ(o.bytes, s.block_optim_bytes / 4 * 3);
    const Task& w = task(TaskKind::params_write, 1);
    EXPECT_EQ(w.src_offset, s.block_param_bytes / 4);
    EXPECT_EQ(w.dst_offset, s.block_param_bytes / 4);
    EXPECT_EQ(w.bytes, s.block_param_bytes / 4 * 3);
  }
  // All storage traffic of the optimizer state adds up to one read and one write of it.
  const PlanTraffic traffic = plan_traffic(v);
  EXPECT_EQ(traffic.of(StateKind::optim, Resource::storage_read), 3 * s.block_optim_bytes);
  EXPECT_EQ(traffic.of(StateKind::optim, Resource::storage_write), 3 * s.block_optim_bytes);
}

TEST(plan_schedules, ParamFetchCounts) {
  for (int L : kBlocks) {
    for (int M : kMicro) {
      const ScheduleSpec s = spec(L, M, Placement::storage, Placement::storage, Placement::host);
      const auto v = count_per_block(make_vertical_plan(s), TaskKind::params_fetch);
      const auto h = count_per_block(make_horizontal_plan(s), TaskKind::params_fetch);
      for (int l = 0; l < L; ++l) {
        // The fused last block keeps its params on the device for its backward: one fetch.
        EXPECT_EQ(v.at(l), l == L - 1 ? 1 : 2) << "vertical L=" << L << " M=" << M << " l=" << l;
        EXPECT_EQ(h.at(l), 2 * M) << "horizontal L=" << L << " M=" << M << " l=" << l;
      }
    }
  }
}

TEST(plan_schedules, ParamStorageReadBytes) {
  for (int L : kBlocks) {
    const auto at = [&](int M, bool vertical) {
      const ScheduleSpec s = spec(L, M, Placement::storage, Placement::storage, Placement::host);
      const Plan p = vertical ? make_vertical_plan(s) : make_horizontal_plan(s);
      return plan_traffic(p).of(StateKind::params, Resource::storage_read);
    };
    const int64_t v1 = at(1, true), h1 = at(1, false);
    EXPECT_GT(v1, 0);
    for (int M : kMicro) {
      EXPECT_EQ(at(M, true), v1) << "L=" << L << " M=" << M;
      EXPECT_EQ(at(M, false), M * h1) << "L=" << L << " M=" << M;
    }
  }
}

TEST(plan_schedules, SnakeOrderInForward) {
  for (int L : kBlocks) {
    for (int M : kMicro) {
      const Plan p =
          make_vertical_plan(spec(L, M, Placement::host, Placement::host, Placement::host));
      std::map<int, std::vector<int>> order;
      for (const Task& t : p.tasks) {
        if (t.kind == TaskKind::block_forward && t.block >= 0)
          order[t.block].push_back(t.micro_batch);
      }
      for (int l = 0; l < L; ++l) {
        std::vector<int> want;
        for (int i = 0; i < M; ++i) want.push_back(l % 2 == 0 ? i : M - 1 - i);
        EXPECT_EQ(order[l], want) << "L=" << L << " M=" << M << " l=" << l;
      }
    }
  }
}

TEST(plan_schedules, PinnedCheckpointsStayOnHost) {
  for (int L : kBlocks) {
    for (int M : kMicro) {
      const Plan p = make_vertical_plan(
          spec(L, M, Placement::storage, Placement::storage, Placement::storage));
      int storage_ckpt = 0;
      for (const Task& t : p.tasks) {
        if (moved_state(t.kind) != StateKind::checkpoints) continue;
        const bool storage =
            t.resource() == Resource::storage_read || t.resource() == Resource::storage_write;
        int pos = -1;
        for (int i = 0; i < M; ++i) {
          if (vertical_micro_batch(t.block, i, M) == t.micro_batch) pos = i;
        }
        ASSERT_GE(pos, 0) << t.label;
        if (storage) ++storage_ckpt;
        if (pos < 2 || pos >= M - 2) {
          EXPECT_FALSE(storage) << t.label << " M=" << M;
        }
      }
      // With M > 4 the middle micro-batches do go through storage, written and read back.
      if (M > 4 && L > 1) {
        EXPECT_GT(storage_ckpt, 0) << "L=" << L << " M=" << M;
      }
    }
  }
}

TEST(plan_schedules, GradientLeavesDevice) {
  for (int L : kBlocks) {
    for (int M : kMicro) {
      const ScheduleSpec s = spec(L, M, Placement::host, Placement::storage, Placement::host);
      const auto count_d2h = [&](const Plan& p) {
        std::map<int, int> n;
        for (const Task& t : p.tasks) {
          if (t.kind == TaskKind::grad_out) ++n[t.block];
        }
        return n;
      };
      const auto v = count_d2h(make_vertical_plan(s)), h = count_d2h(make_horizontal_plan(s));
      for (int l = 0; l < L; ++l) {
        EXPECT_EQ(v.at(l), 1) << "vertical L=" << L << " M=" << M << " l=" << l;
        EXPECT_EQ(h.at(l), M) << "horizontal L=" << L << " M=" << M << " l=" << l;
      }
    }
  }
}

// Gradients on storage: the vertical plan writes each block's gradient out once, and only the
// range its pending part-1 step needs (none when alpha steps it all in backward), and reads that
// range back once in the next plan; the horizontal plan keeps a running sum on storage (written
// every micro-batch, read back before each later one and for the step). With gradients on host
// nothing of them touches storage.
TEST(plan_schedules, GradientStorageTraffic) {
  const auto grad_bytes = [](const Plan& p, Resource r) {
    return plan_traffic(p).of(StateKind::grads, r);
  };
  for (int L : kBlocks) {
    for (int M : kMicro) {
      ScheduleSpec s = spec(L, M, Placement::storage, Placement::storage, Placement::host);
      const int64_t G = s.block_grad_bytes;
      for (int64_t split : {int64_t{0}, s.block_elems / 4, s.block_elems}) {
        s.split_elems = split;
        s.pending_steps = true;
        s.grads = Placement::storage;
        const int64_t part1 = G - part_bytes(G, s.block_elems, split, 0);
        const Plan v = make_vertical_plan(s);
        EXPECT_EQ(grad_bytes(v, Resource::storage_write), L * part1)
            << L << " " << M << " " << split;
        EXPECT_EQ(grad_bytes(v, Resource::storage_read), L * part1)
            << L << " " << M << " " << split;
        s.grads = Placement::host;
        const Plan vh = make_vertical_plan(s);
        EXPECT_EQ(grad_bytes(vh, Resource::storage_write) + grad_bytes(vh, Resource::storage_read),
                  0);
      }
      s.split_elems = 0;
      s.pending_steps = false;
      s.grads = Placement::storage;
      const Plan h = make_horizontal_plan(s);
      EXPECT_EQ(grad_bytes(h, Resource::storage_write), int64_t{L} * M * G);
      EXPECT_EQ(grad_bytes(h, Resource::storage_read), int64_t{L} * M * G);
    }
  }
}

// The embed group's state on storage (Note [Embed step in chunks]): read and written once per
// step in block-sized chunks, three ranges each; on host it never touches storage.
TEST(plan_schedules, EmbedStateOnStorageMovesOncePerStep) {
  for (Placement op : kOff) {
    ScheduleSpec s = spec(3, 2, Placement::host, Placement::host, Placement::host);
    s.embed_optim = op;
    for (const Plan& p : {make_vertical_plan(s), make_horizontal_plan(s)}) {
      const PlanTraffic t = plan_traffic(p);
      const int64_t want = op == Placement::storage ? s.embed_optim_bytes : 0;
      EXPECT_EQ(t.of(StateKind::optim, Resource::storage_read), want);
      EXPECT_EQ(t.of(StateKind::optim, Resource::storage_write), want);
      int steps = 0;
      for (const Task& task : p.tasks) steps += task.kind == TaskKind::embed_step;
      EXPECT_EQ(steps, op == Placement::storage ? 3 : 1);
    }
  }
}

TEST(plan_schedules, VerticalRefusedUnderDeviceBudget) {
  const ScheduleSpec s = spec(3, 4, Placement::storage, Placement::storage, Placement::storage);
  const Plan p = make_vertical_plan(s);
  ASSERT_TRUE(check_plan(p, {}).ok());
  // Less than the two parameter buffers alone.
  Status st = check_plan(p, {.device = 2 * s.block_param_bytes - 1});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("device"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace strata
