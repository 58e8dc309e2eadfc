// The offloaded trainer's activations.policy "auto" (vertical schedule): per block, keep the
// saved activations on the device, offload them, or recompute the forward, with the reasons
// logged.
#include "train/offload_acts_policy.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/format.h"
#include "core/log.h"
#include "model/block.h"
#include "model/init.h"
#include "sched/plan_checker.h"
#include "train/offload_spec.h"

namespace strata {

namespace {

// One block's forward on one micro-batch, on `dev`, in seconds (0: no room to measure).
double measure_block_forward_s(Device& dev, const OffloadShape& shape) {
  // With real (initial) weights.
  const int64_t n = shape.block_elems, BT = shape.cfg.batch_size * shape.cfg.seq_len,
                C = shape.cfg.model.n_embd;
  FloatCarver counter(nullptr);
  block_acts_carve(counter, shape.dims);
  auto params = dev.alloc(n * 4);
  auto io = dev.alloc(2 * BT * C * 4);
  auto acts = dev.alloc(counter.used() * 4);
  if (!params.ok() || !io.ok() || !acts.ok()) return 0;  // no room to measure: decided by memory
  std::vector<float> host(static_cast<size_t>(n), 0.0f);
  init_param_slab(shape.layout, shape.layout.block_slab(0), host.data(),
                  static_cast<uint64_t>(shape.cfg.seed));
  auto s = dev.create_stream("measure");
  dev.copy(*s, params->data(), host.data(), n * 4);
  dev.fill_zero(*s, io->data(), 2 * BT * C * 4);
  FloatCarver c(acts->f32());
  const BlockActs a = block_acts_carve(c, shape.dims);
  const BlockView w = block_slab_view(shape.layout, params->f32(), 0);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {  // the first warms caches and thread pools up
    const auto t0 = std::chrono::steady_clock::now();
    block_forward(dev, *s, io->f32() + BT * C, a, io->f32(), w, shape.dims);
    s->synchronize();
    if (rep > 0) {
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return best;
}

}  // namespace

std::vector<ActPolicy> decide_activation_policy(Device& dev, const OffloadShape& shape) {
  const ScheduleSpec base = offload_schedule_spec(dev, shape.cfg, false, true);
  std::vector<ActPolicy> policy = base.acts_at;
  if (shape.cfg.activations.policy != ActsMode::automatic || policy.empty()) return policy;
  const int64_t L = shape.cfg.model.n_layer, M = shape.cfg.grad_accum, S = base.acts_bytes;
  // Keep (on the device) the last blocks, whose backward comes soonest, as far as the device
  // budget allows beyond what the plan needs with everything offloaded; no budget: keep all.
  int64_t keep = L - 1;
  std::string why_keep = "no device budget (memory.device_bytes = 0)";
  if (shape.cfg.memory.device_bytes > 0) {
    const int64_t base_device =
        plan_stats(make_offload_plan(base, shape.cfg.schedule)).bytes_per_tier[0];
    const int64_t room = std::max<int64_t>(shape.cfg.memory.device_bytes - base_device, 0);
    keep = std::min<int64_t>(L - 1, room / std::max<int64_t>(M * S, 1));
    why_keep = format_bytes(room) + " of the device budget left with everything offloaded, " +
               format_bytes(M * S) + " per kept block";
  }
  // Offload the rest where storage hides it: one micro-batch's saved set written within one
  // micro-batch's forward of its block (the read comes back in a backward three times longer).
  const double f = measure_block_forward_s(dev, shape);
  const double w = static_cast<double>(shape.cfg.io.write_bytes_per_s);
  const bool to_storage = shape.cfg.activations.tier == ActsTier::storage;
  const double write_s = to_storage && w > 0 ? static_cast<double>(S) / w : 0.0;
  const bool hidden = write_s <= f;
  std::string kept, offloaded, recomputed;
  for (int64_t l = 0; l < L - 1; ++l) {
    ActPolicy& p = policy[static_cast<size_t>(l)];
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
                enum_name(shape.cfg.activations.tier), recomputed.c_str(), format_bytes(S).c_str(),
                write_s * 1e3, f * 1e3,
                hidden ? "hidden behind compute" : "not hidden: recomputing is cheaper");
  log_info(line);
  return policy;
}

}  // namespace strata
