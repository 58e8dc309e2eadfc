#include "sched/plan_builder.h"

#include <algorithm>

namespace strata {

std::string task_label(TaskKind kind, const TaskTag& tag) {
  std::string label = kind_label(kind);
  if (tag.block >= 0) label += " blk." + std::to_string(tag.block);
  if (tag.block < 0 && kind_label_names_group(kind)) label += " embed";
  if (tag.micro_batch >= 0) label += " mb." + std::to_string(tag.micro_batch);
  if (tag.part >= 0) label += " p" + std::to_string(tag.part);
  return label;
}

int32_t PlanBuilder::slot(std::string name, Tier tier, int64_t bytes, bool initialized) {
  last_write_.push_back(-1);
  readers_.emplace_back();
  return plan_.add_slot(std::move(name), tier, bytes, initialized);
}

int32_t PlanBuilder::task(Task t) {
  if (t.label.empty()) t.label = task_label(t.kind, {t.block, t.micro_batch, t.part});
  auto dep = [&](int32_t d) {
    if (d >= 0 && plan_.tasks[static_cast<size_t>(d)].resource() != t.resource() &&
        std::find(t.deps.begin(), t.deps.end(), d) == t.deps.end()) {
      t.deps.push_back(d);
    }
  };
  for (const SlotUse& u : t.uses) {
    dep(last_write_[static_cast<size_t>(u.slot)]);
    if (u.write) {
      for (int32_t r : readers_[static_cast<size_t>(u.slot)]) dep(r);
    }
  }
  const auto id = static_cast<int32_t>(plan_.tasks.size());
  for (const SlotUse& u : t.uses) {
    if (u.write) {
      last_write_[static_cast<size_t>(u.slot)] = id;
      readers_[static_cast<size_t>(u.slot)].clear();
    }
  }
  for (const SlotUse& u : t.uses) {
    if (!u.write) readers_[static_cast<size_t>(u.slot)].push_back(id);
  }
  return plan_.add_task(std::move(t));
}

int32_t PlanBuilder::task(TaskKind kind, const TaskTag& tag, std::vector<SlotUse> uses,
                          int64_t bytes, double flops) {
  Task t{.kind = kind};
  t.block = tag.block;
  t.micro_batch = tag.micro_batch;
  t.part = tag.part;
  t.uses = std::move(uses);
  t.bytes = bytes;
  t.flops = flops;
  return task(std::move(t));
}

int32_t PlanBuilder::transfer(TaskKind kind, const TaskTag& tag, int32_t src, int32_t dst,
                              int64_t bytes) {
  return transfer_range(kind, tag, src, 0, dst, 0, bytes);
}

int32_t PlanBuilder::transfer_range(TaskKind kind, const TaskTag& tag, int32_t src,
                                    int64_t src_offset, int32_t dst, int64_t dst_offset,
                                    int64_t bytes) {
  Task t{.kind = kind};
  t.block = tag.block;
  t.micro_batch = tag.micro_batch;
  t.part = tag.part;
  t.uses = {slot_read(src, Role::src), slot_write(dst, Role::dst)};
  t.bytes = bytes;
  t.src_offset = src_offset;
  t.dst_offset = dst_offset;
  return task(std::move(t));
}

void PlanBuilder::move_out(TaskKind copy, TaskKind flush, const TaskTag& tag, int32_t from,
                           int32_t to, SlotRing& ring, int64_t bytes) {
  if (tier(to) != Tier::storage) {
    transfer(copy, tag, from, to, bytes);
    return;
  }
  const int32_t stage = ring.take();
  transfer(copy, tag, from, stage, bytes);
  transfer(flush, tag, stage, to, bytes);
}

int32_t PlanBuilder::to_host(TaskKind read, const TaskTag& tag, int32_t from, SlotRing& ring,
                             int64_t bytes) {
  if (tier(from) != Tier::storage) return from;
  const int32_t stage = ring.take();
  transfer(read, tag, from, stage, bytes);
  return stage;
}

}  // namespace strata
