#include "sched/schedule_spec.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/math_util.h"

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

PartShard part_shard(int64_t block_elems, int64_t split_elems, int32_t part, int ranks, int rank,
                     int64_t frozen_elems) {
  PartShard p;
  p.part_begin = part == 1 ? split_elems : frozen_elems;
  p.part_end = part == 0 ? split_elems : block_elems;
  const int64_t len = p.part_end - p.part_begin;
  const Range mine = shard_range(len, ranks, rank);
  p.begin = p.part_begin + mine.begin;
  p.end = p.part_begin + mine.end;
  const Range first = shard_range(len, ranks, 0);  // the longest shard
  p.stride = first.end - first.begin;
  return p;
}

int64_t kept_grad_bytes(const ScheduleSpec& s) {
  if (!s.shard_grads || s.ranks <= 1 || s.block_elems <= 0) return s.block_grad_bytes;
  const int64_t stride = part_shard(s.block_elems, 0, -1, s.ranks, 0).stride;
  return part_bytes(s.block_grad_bytes, s.block_elems, stride, 0);
}

namespace {

// Elements [begin, end) of part `part` of a block quantity that rank s.rank keeps: its shard,
// widened to whole I/O units of `width`-byte elements within the part.
std::pair<int64_t, int64_t> kept_shard_elems(const ScheduleSpec& s, int64_t width, int32_t part) {
  const PartShard sh =
      part_shard(s.block_elems, s.split_elems, part, s.ranks, s.rank, s.frozen_elems);
  if (sh.end <= sh.begin) return {0, 0};
  const int64_t u = std::max<int64_t>(s.grad_io_elems * 4 / width, 1);
  return {sh.begin / u * u, std::min(round_up(sh.end, u), sh.part_end)};
}

}  // namespace

std::vector<StoreRange> shard_store_ranges(const ScheduleSpec& s, int64_t block_bytes,
                                           int32_t part) {
  const int64_t n = s.block_elems, a = s.split_elems;
  if ((s.ranks <= 1 || n <= 0) && s.frozen_elems == 0) {
    const int64_t at = part == 1 ? part_bytes(block_bytes, n, a, 0) : 0;
    const int64_t bytes = part_bytes(block_bytes, n, a, part);
    if (bytes == 0) return {};
    return {{at, at, bytes}};
  }
  const int64_t width = std::max<int64_t>(block_bytes / n, 1);  // exact: bytes = n * width
  if (s.ranks <= 1) {  // Note [Frozen base]: the part's trained range, in the block's layout
    const PartShard p = part_shard(n, a, part, 1, 0, s.frozen_elems);
    const int64_t at = p.part_begin * width, bytes = (p.part_end - p.part_begin) * width;
    if (bytes == 0) return {};
    return {{at, at, bytes}};
  }
  std::vector<StoreRange> ranges;
  int64_t store_at = 0;
  for (int32_t q = 0; q < 2; ++q) {
    const auto [begin, end] = kept_shard_elems(s, width, q);
    const int64_t bytes = (end - begin) * width;
    if ((part < 0 || q == part) && bytes > 0) ranges.push_back({begin * width, store_at, bytes});
    store_at += bytes;
  }
  return ranges;
}

int64_t shard_store_bytes(const ScheduleSpec& s, int64_t block_bytes) {
  int64_t bytes = 0;  // the ranges of both parts, packed from 0
  for (const StoreRange& r : shard_store_ranges(s, block_bytes, -1)) bytes += r.bytes;
  return bytes;
}

std::vector<StoreRange> params_store_ranges(const ScheduleSpec& s, int32_t part) {
  if (part < 0 && s.ranks <= 1) return {{0, 0, s.block_param_bytes}};
  return shard_store_ranges(s, s.block_param_bytes, part);
}

std::vector<StoreRange> frozen_params_ranges(const ScheduleSpec& s) {
  if (s.frozen_elems <= 0) return {};
  const int64_t bytes = part_bytes(s.block_param_bytes, s.block_elems, s.frozen_elems, 0);
  return {{0, 0, bytes}};
}

std::vector<StoreRange> vertical_kept_grad_ranges(const ScheduleSpec& s, int32_t part) {
  if (s.frozen_elems == 0) return shard_store_ranges(s, s.block_grad_bytes, part);
  // One rank (Note [Frozen base]): the part's range, in a gradient laid out from frozen_elems.
  std::vector<StoreRange> ranges = shard_store_ranges(s, s.block_elems * 4, part);
  for (StoreRange& r : ranges) r.stage_at = r.store_at = r.stage_at - s.frozen_elems * 4;
  return ranges;
}

std::vector<StoreRange> host_device_ranges(const ScheduleSpec& s, int64_t block_bytes) {
  if (params_gather(s) == ParamsGather::device) return shard_store_ranges(s, block_bytes, -1);
  return {{0, 0, block_bytes}};
}

std::vector<int32_t> block_param_parts(const ScheduleSpec& s, int32_t part) {
  if (part >= 0) return {part};
  if (s.split_elems > 0 && s.split_elems < s.block_elems) return {0, 1};
  return {-1};
}

int64_t embed_chunk_elems_for(const ScheduleSpec& s) {
  const int64_t n = s.block_elems;
  // Note [Frozen base]: a stage the size of the trained elements' state, not the block's.
  if (s.frozen_elems > 0) return round_up(trained_elems(s), std::max<int64_t>(s.grad_io_elems, 1));
  if (s.ranks <= 1 || n <= 0) return n;
  const bool split = s.split_elems > 0 && s.split_elems < n;
  int64_t stride = 0;
  for (int32_t part : split ? std::vector<int32_t>{0, 1} : std::vector<int32_t>{-1}) {
    stride = std::max(stride, part_shard(n, s.split_elems, part, s.ranks, 0).stride);
  }
  return std::min(n, round_up(stride, std::max<int64_t>(s.grad_io_elems, 1)));
}

int64_t optim_stage_bytes(const ScheduleSpec& s) {
  // The embed group's chunks step through it too: bytes of its (3, chunk), whatever trains.
  if (s.frozen_elems > 0) return embed_chunk_elems_for(s) * (s.embed_optim_bytes / s.embed_elems);
  return part_bytes(s.block_optim_bytes, s.block_elems, embed_chunk_elems_for(s), 0);
}

int64_t optim_part_bytes(const ScheduleSpec& s, int32_t part) {
  if (s.frozen_elems > 0) {  // one rank (Note [Frozen base]): of the trained elements
    return part_bytes(s.block_optim_bytes, trained_elems(s), s.split_elems - s.frozen_elems, part);
  }
  const int64_t bytes = part_bytes(s.block_optim_bytes, s.block_elems, s.split_elems, part);
  if (s.ranks <= 1 || s.block_elems <= 0) return bytes;
  // The bytes of `stride` elements of state (exact for bytes = elems * width).
  const int64_t stride = part_shard(s.block_elems, s.split_elems, part, s.ranks, 0).stride;
  return part_bytes(s.block_optim_bytes, s.block_elems, stride, 0);
}

int64_t part_bytes(int64_t bytes, int64_t elems, int64_t split, int32_t part) {
  if (part < 0 || elems <= 0) return bytes;
  // bytes * split / elems without overflow for any realistic size.
  const int64_t first = bytes / elems * split + bytes % elems * split / elems;
  return part == 0 ? first : bytes - first;
}

}  // namespace strata
