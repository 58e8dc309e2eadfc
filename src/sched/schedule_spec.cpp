#include "sched/schedule_spec.h"

#include <cmath>

namespace strata {

const char* act_policy_name(ActPolicy p) {
  switch (p) {
    case ActPolicy::recompute:
      return "recompute";
    case ActPolicy::keep:
      return "keep";
    case ActPolicy::host:
      return "host";
    case ActPolicy::storage:
      return "storage";
  }
  return "?";
}

std::vector<Placement> placement_by_fraction(int32_t blocks, double fraction_on_host) {
  const auto on_host = static_cast<int32_t>(std::lround(fraction_on_host * blocks));
  std::vector<Placement> at(static_cast<size_t>(blocks), Placement::storage);
  for (int32_t l = 0; l < on_host && l < blocks; ++l) at[static_cast<size_t>(l)] = Placement::host;
  return at;
}

BlockTiers block_tiers(const ScheduleSpec& s) {
  BlockTiers t;
  for (int l = 0; l < s.blocks; ++l) {
    t.params.push_back(offload_tier(placement_of(s.params_at, s.params, l)));
    t.optim.push_back(offload_tier(placement_of(s.optim_at, s.optim, l)));
    t.checkpoints.push_back(offload_tier(placement_of(s.checkpoints_at, s.checkpoints, l)));
    t.grads.push_back(offload_tier(placement_of(s.grads_at, s.grads, l)));
    t.grads_on_storage |= t.grads.back() == Tier::storage;
    t.params_on_storage |= t.params.back() == Tier::storage;
    t.optim_on_storage |= t.optim.back() == Tier::storage;
    t.checkpoints_on_storage |= t.checkpoints.back() == Tier::storage;
  }
  return t;
}

int64_t part_bytes(int64_t bytes, int64_t elems, int64_t split, int32_t part) {
  if (part < 0 || elems <= 0) return bytes;
  // bytes * split / elems without overflow for any realistic size.
  const int64_t first = bytes / elems * split + bytes % elems * split / elems;
  return part == 0 ? first : bytes - first;
}

}  // namespace strata
