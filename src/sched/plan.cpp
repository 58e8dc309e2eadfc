#include "sched/plan.h"

#include <nlohmann/json.hpp>

namespace strata {

const char* resource_name(Resource r) {
  switch (r) {
    case Resource::compute:
      return "compute";
    case Resource::h2d:
      return "h2d";
    case Resource::d2h:
      return "d2h";
    case Resource::storage_read:
      return "storage_read";
    case Resource::storage_write:
      return "storage_write";
    case Resource::cpu_optim:
      return "cpu_optim";
    case Resource::net:
      return "net";
  }
  return "?";
}

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::device:
      return "device";
    case Tier::host:
      return "host";
    case Tier::storage:
      return "storage";
  }
  return "?";
}

int32_t Plan::add_slot(std::string name, Tier tier, int64_t bytes, bool initialized) {
  slots.push_back(Slot{std::move(name), tier, bytes, initialized});
  return static_cast<int32_t>(slots.size()) - 1;
}

int32_t Plan::add_task(Task task) {
  tasks.push_back(std::move(task));
  return static_cast<int32_t>(tasks.size()) - 1;
}

std::string Plan::describe(int32_t task) const {
  if (task < 0 || task >= static_cast<int32_t>(tasks.size())) {
    return "task #" + std::to_string(task) + " (out of range)";
  }
  const Task& t = tasks[task];
  std::string label = t.label.empty() ? "#" + std::to_string(task) : t.label;
  return "'" + label + "' (" + resource_name(t.resource()) + ")";
}

std::string Plan::describe_slot(int32_t slot) const {
  if (slot < 0 || slot >= static_cast<int32_t>(slots.size())) {
    return "slot #" + std::to_string(slot) + " (out of range)";
  }
  const Slot& s = slots[slot];
  return "'" + s.name + "' (" + tier_name(s.tier) + ")";
}

int64_t PlanTraffic::on(Resource r) const {
  int64_t total = 0;
  for (int64_t b : bytes[static_cast<size_t>(r)]) total += b;
  return total;
}

int64_t PlanTraffic::of(StateKind s, Resource r) const {
  return bytes[static_cast<size_t>(r)][static_cast<size_t>(s)];
}

PlanTraffic plan_traffic(const Plan& plan) {
  PlanTraffic t;
  for (const Task& task : plan.tasks) {
    if (!is_transfer(task.kind)) continue;
    const auto r = static_cast<size_t>(task.resource());
    if (r < t.bytes.size()) t.bytes[r][static_cast<size_t>(moved_state(task.kind))] += task.bytes;
  }
  return t;
}

nlohmann::json plan_to_json(const Plan& plan) {
  nlohmann::json slots = nlohmann::json::array();
  for (const Slot& s : plan.slots) {
    slots.push_back({{"name", s.name},
                     {"tier", tier_name(s.tier)},
                     {"bytes", s.bytes},
                     {"initialized", s.initialized}});
  }
  nlohmann::json tasks = nlohmann::json::array();
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const Task& t = plan.tasks[i];
    nlohmann::json reads = nlohmann::json::array(), writes = nlohmann::json::array();
    nlohmann::json uses = nlohmann::json::array();
    for (const SlotUse& u : t.uses) {
      (u.write ? writes : reads).push_back(u.slot);
      uses.push_back({{"slot", u.slot}, {"write", u.write}, {"role", role_name(u.role)}});
    }
    tasks.push_back({{"index", i},
                     {"kind", task_kind_name(t.kind)},
                     {"resource", resource_name(t.resource())},
                     {"label", t.label},
                     {"block", t.block},
                     {"micro_batch", t.micro_batch},
                     {"deps", t.deps},
                     {"reads", reads},
                     {"writes", writes},
                     {"uses", uses},
                     {"bytes", t.bytes},
                     {"flops", t.flops},
                     {"src_offset", t.src_offset},
                     {"dst_offset", t.dst_offset},
                     {"part", t.part},
                     {"fused", t.fused}});
  }
  return {{"slots", slots}, {"tasks", tasks}};
}

}  // namespace strata
