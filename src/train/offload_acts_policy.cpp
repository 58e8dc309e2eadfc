// The offloaded trainer's activations.policy "auto" (vertical schedule): per block, keep the
// saved activations on the device, offload them, or recompute the forward, with the reasons
// logged.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/format.h"
#include "core/log.h"
#include "model/init.h"
#include "sched/plan_checker.h"
#include "train/offload_trainer.h"

namespace strata {

double OffloadTrainer::measure_block_forward_s() {
  // One block's forward on one micro-batch, on this device, with real (initial) weights.
  const int64_t n = shape_.block_elems, BT = shape_.cfg.batch_size * shape_.cfg.seq_len,
                C = shape_.cfg.model.n_embd;
  FloatCarver counter(nullptr);
  block_acts_carve(counter, shape_.dims);
  auto params = dev_.alloc(n * 4);
  auto io = dev_.alloc(2 * BT * C * 4);
  auto acts = dev_.alloc(counter.used() * 4);
  if (!params.ok() || !io.ok() || !acts.ok()) return 0;  // no room to measure: decided by memory
  std::vector<float> host(static_cast<size_t>(n), 0.0f);
  init_param_slab(shape_.layout, shape_.layout.block_slab(0), host.data(),
                  static_cast<uint64_t>(shape_.cfg.seed));
  auto s = dev_.create_stream("measure");
  dev_.copy(*s, params->data(), host.data(), n * 4);
  dev_.fill_zero(*s, io->data(), 2 * BT * C * 4);
  FloatCarver c(acts->f32());
  const BlockActs a = block_acts_carve(c, shape_.dims);
  const BlockView w = block_slab_view(shape_.layout, params->f32(), 0);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {  // the first warms caches and thread pools up
    const auto t0 = std::chrono::steady_clock::now();
    block_forward(dev_, *s, io->f32() + BT * C, a, io->f32(), w, shape_.dims);
    s->synchronize();
    if (rep > 0) {
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return best;
}

Status OffloadTrainer::decide_activation_policy() {
  const ScheduleSpec base = offload_schedule_spec(dev_, shape_.cfg, false, true);
  acts_policy_ = base.acts_at;
  if (shape_.cfg.activations.policy != ActsMode::automatic || acts_policy_.empty()) {
    return Status::ok_status();
  }
  const int64_t L = shape_.cfg.model.n_layer, M = shape_.cfg.grad_accum, S = base.acts_bytes;
  // Keep (on the device) the last blocks, whose backward comes soonest, as far as the device
  // budget allows beyond what the plan needs with everything offloaded; no budget: keep all.
  int64_t keep = L - 1;
  std::string why_keep = "no device budget (memory.device_bytes = 0)";
  if (shape_.cfg.memory.device_bytes > 0) {
    const int64_t base_device =
        plan_stats(make_offload_plan(base, shape_.cfg.schedule)).bytes_per_tier[0];
    const int64_t room = std::max<int64_t>(shape_.cfg.memory.device_bytes - base_device, 0);
    keep = std::min<int64_t>(L - 1, room / std::max<int64_t>(M * S, 1));
    why_keep = format_bytes(room) + " of the device budget left with everything offloaded, " +
               format_bytes(M * S) + " per kept block";
  }
  // Offload the rest where storage hides it: one micro-batch's saved set written within one
  // micro-batch's forward of its block (the read comes back in a backward three times longer).
  const double f = measure_block_forward_s();
  const double w = static_cast<double>(shape_.cfg.io.write_bytes_per_s);
  const bool to_storage = shape_.cfg.activations.tier == ActsTier::storage;
  const double write_s = to_storage && w > 0 ? static_cast<double>(S) / w : 0.0;
  const bool hidden = write_s <= f;
  std::string kept, offloaded, recomputed;
  for (int64_t l = 0; l < L - 1; ++l) {
    ActPolicy& p = acts_policy_[static_cast<size_t>(l)];
    if (l >= L - 1 - keep) {
      p = ActPolicy::keep;
      kept += (kept.empty() ? "" : ",") + std::to_string(l);
    } else if (hidden) {
      offloaded += (offloaded.empty() ? "" : ",") + std::to_string(l);
    } else {
      p = ActPolicy::recompute;
      recomputed += (recomputed.empty() ? "" : ",") + std::to_string(l);
    }
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "activations (auto): keep blocks [%s] on the device (%s); offload [%s] to %s; "
                "recompute [%s]: a saved set is %s, its write takes %.1f ms against %.1f ms of "
                "forward per micro-batch (%s)",
                kept.c_str(), why_keep.c_str(), offloaded.c_str(),
                enum_name(shape_.cfg.activations.tier), recomputed.c_str(), format_bytes(S).c_str(),
                write_s * 1e3, f * 1e3,
                hidden ? "hidden behind compute" : "not hidden: recomputing is cheaper");
  log_info(line);
  return Status::ok_status();
}

}  // namespace strata
