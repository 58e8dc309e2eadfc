// Note [Frozen base] (sched/schedule_spec.h): with LoRA the offloaded plans read a block's frozen
// prefix and never write it, and keep no gradient or optimizer state for it (CTest names
// frozen_base.*). The plans pass the checker, read what full training reads, and write only
// the adapters; a LoRA config's spec freezes the prefix with one rank and nothing with several.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "model/layout.h"
#include "sched/plan_checker.h"
#include "sched/schedule_horizontal.h"
#include "sched/schedule_spec.h"
#include "sched/schedule_vertical.h"
#include "train/offload_spec.h"

namespace strata {
namespace {

constexpr int64_t kUnit = 2048;  // elements: one 4 KiB direct-I/O block of bf16

// A block of 64 units, the first `frozen` of them frozen; bf16 params, everything on storage.
ScheduleSpec spec(int L, int M, int64_t frozen_units) {
  ScheduleSpec s;
  s.blocks = L;
  s.micro_batches = M;
  s.block_elems = 64 * kUnit;
  s.frozen_elems = frozen_units * kUnit;
  s.split_elems = s.frozen_elems;
  s.grad_io_elems = 1024;
  s.block_param_bytes = s.block_elems * 2;
  s.block_grad_bytes = trained_elems(s) * 4;
  s.block_optim_bytes = trained_elems(s) * 12;
  s.checkpoint_bytes = 1 << 16;
  s.embed_elems = 3 * kUnit;
  s.embed_param_bytes = s.embed_elems * 4;
  s.embed_optim_bytes = s.embed_elems * 12;
  s.embed_optim = Placement::storage;  // and frozen: never read or written by a step
  s.embed_frozen = true;
  s.params = s.optim = s.grads = s.checkpoints = Placement::storage;
  s.pending_steps = true;
  return s;
}

int64_t traffic(const Plan& p, StateKind k, Resource r) {
  return plan_traffic(p).of(k, r);
}

// Vertical, at alpha 1 (part 0 empty), 1/2 and 0 (part 1 empty), and horizontal: per step the
// params are read as in full training (the whole block per fetch), and only the trained elements'
// params are written and their gradient and optimizer state moved; a frozen embed group's state
// (on storage here) does not move, nor does its gradient leave the device.
TEST(frozen_base, PlansReadTheBaseAndWriteOnlyTheAdapters) {
  for (int L : {1, 3}) {
    for (int M : {1, 4}) {
      for (int64_t split_units : {int64_t{48}, int64_t{56}, int64_t{64}}) {
        ScheduleSpec s = spec(L, M, 48);
        s.split_elems = split_units * kUnit;
        const std::string what = "L=" + std::to_string(L) + " M=" + std::to_string(M) +
                                 " split=" + std::to_string(split_units);
        const int64_t trained = trained_elems(s);
        for (bool vertical : {true, false}) {
          if (!vertical) s.split_elems = s.frozen_elems;
          const Plan p = vertical ? make_vertical_plan(s) : make_horizontal_plan(s);
          ASSERT_TRUE(check_task_signatures(p).ok()) << what;
          ASSERT_TRUE(check_plan(p, {}).ok()) << what << ": " << check_plan(p, {}).to_string();
          ScheduleSpec full = s;  // the same split, nothing frozen
          full.frozen_elems = 0;
          full.block_grad_bytes = s.block_elems * 4;
          full.block_optim_bytes = s.block_elems * 12;
          const Plan f = vertical ? make_vertical_plan(full) : make_horizontal_plan(full);
          EXPECT_EQ(traffic(p, StateKind::params, Resource::storage_read),
                    traffic(f, StateKind::params, Resource::storage_read))
              << what << (vertical ? " vertical" : " horizontal");
          EXPECT_EQ(traffic(p, StateKind::params, Resource::storage_write), L * trained * 2)
              << what;
          EXPECT_EQ(traffic(p, StateKind::optim, Resource::storage_read), L * trained * 12) << what;
          EXPECT_EQ(traffic(p, StateKind::optim, Resource::storage_write), L * trained * 12)
              << what;
          EXPECT_LE(traffic(p, StateKind::grads, Resource::storage_write),
                    int64_t{L} * M * trained * 4)
              << what;
          EXPECT_LT(traffic(p, StateKind::params, Resource::storage_write),
                    traffic(f, StateKind::params, Resource::storage_write))
              << what;
          for (const Task& t : p.tasks) {
            EXPECT_FALSE(t.kind == TaskKind::embed_step ||
                         (t.kind == TaskKind::grad_out && t.block < 0))
                << what << ": " << t.label << " of a frozen embed group";
          }
        }
      }
    }
  }
}

TEST(frozen_base, LoraSpecFreezesThePrefixWithOneRank) {
  TrainConfig c;
  c.model.arch = ModelArch::llama;
  c.model.vocab_size = 256;
  c.model.context_length = 32;
  c.model.n_layer = 2;
  c.model.tie_embeddings = false;
  c.seq_len = 32;
  c.model.n_embd = 128;
  c.model.n_head = 2;
  c.model.n_kv_head = 1;
  c.model.ffn_hidden = 256;
  c.schedule = Schedule::vertical;
  c.precision = Precision::bf16;
  const ScheduleSpec none = offload_schedule_spec(DeviceTraits{}, c, false, true);
  EXPECT_EQ(none.frozen_elems, 0);
  c.lora.rank = 4;
  const ParamLayout layout = make_param_layout(c.model, c.lora);
  const Slab& blk = layout.slabs[static_cast<size_t>(layout.block_slab(0))];
  int64_t first = blk.numel;  // the first adapter element
  for (int64_t i = blk.first_tensor; i < blk.first_tensor + blk.tensor_count; ++i) {
    const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
    if (!t.frozen) first = std::min(first, t.offset - blk.offset);
  }
  const ScheduleSpec s = offload_schedule_spec(DeviceTraits{}, c, false, true);
  EXPECT_GT(s.frozen_elems, 0);
  EXPECT_LE(s.frozen_elems, first);
  EXPECT_GT(s.frozen_elems + kUnit, first) << "rounded down by less than one I/O unit";
  EXPECT_EQ(s.frozen_elems % kUnit, 0);
  EXPECT_EQ(s.block_optim_bytes, trained_elems(s) * 12);
  EXPECT_EQ(s.block_grad_bytes, trained_elems(s) * 4);
  EXPECT_TRUE(s.embed_frozen);
  c.lora.modules_to_save = {"lm_head"};
  EXPECT_FALSE(offload_schedule_spec(DeviceTraits{}, c, false, true).embed_frozen);
  c.lora.modules_to_save = {};
  c.optim.alpha = 0.5;
  const ScheduleSpec half = offload_schedule_spec(DeviceTraits{}, c, false, true);
  EXPECT_GT(half.split_elems, half.frozen_elems);
  EXPECT_LT(half.split_elems, half.block_elems);
  c.ranks = 2;
  EXPECT_EQ(offload_schedule_spec(DeviceTraits{}, c, false, true).frozen_elems, 0);
}

}  // namespace
}  // namespace strata
