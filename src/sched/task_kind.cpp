// The signature of every task kind (Note [Task signatures] in task_kind.h): one table.
#include "sched/task_kind.h"

#include <array>
#include <string>

#include "sched/plan.h"

namespace strata {

namespace {

enum class Access : uint8_t {
  read,
  write,
  read_write,
  write_maybe_read,  // written; also read when the task accumulates into it
  read_maybe_write,  // read; also written when the task has no separate output for it
};

struct RoleSpec {
  Role role;
  Access access;
  bool optional = false;
};

struct KindInfo {
  const char* name;
  const char* label;  // the short name traces show ("fwd", "read.params")
  bool group_label;   // labels say "embed" when the task has no block
  Resource resource;
  StateKind moves;  // transfers only
  std::array<RoleSpec, 6> roles;
  int role_count;
  // A net task whose collective moves device buffers (Note [Collectives on device memory]): its
  // slots are device slots (Note [Where a task's slots live]).
  bool device_memory = false;
};

constexpr RoleSpec rd(Role r, bool optional = false) {
  return {r, Access::read, optional};
}
constexpr RoleSpec wr(Role r, bool optional = false) {
  return {r, Access::write, optional};
}
constexpr RoleSpec rw(Role r) {
  return {r, Access::read_write, false};
}
constexpr RoleSpec acc(Role r) {
  return {r, Access::write_maybe_read, false};
}
constexpr RoleSpec upd(Role r) {
  return {r, Access::read_maybe_write, false};
}

constexpr KindInfo transfer(const char* name, const char* label, Resource r, StateKind moves,
                            bool group_label = false) {
  return {name, label, group_label, r, moves, {rd(Role::src), wr(Role::dst)}, 2};
}

// Indexed by TaskKind; the static_assert below keeps it in step with the enum.
constexpr std::array<KindInfo, kTaskKindCount> kKinds = {{
    transfer("tokens_upload", "tokens.load", Resource::h2d, StateKind::tokens),
    transfer("params_read", "read.params", Resource::storage_read, StateKind::params),
    transfer("params_fetch", "fetch.params", Resource::h2d, StateKind::params, true),
    transfer("params_write", "write.params", Resource::storage_write, StateKind::params),
    transfer("optim_read", "read.optim", Resource::storage_read, StateKind::optim),
    transfer("optim_write", "write.optim", Resource::storage_write, StateKind::optim),
    transfer("grad_out", "grad.out", Resource::d2h, StateKind::grads, true),
    transfer("grad_write", "write.grad", Resource::storage_write, StateKind::grads),
    transfer("grad_read", "read.grad", Resource::storage_read, StateKind::grads),
    transfer("ckpt_write", "ckpt.write", Resource::d2h, StateKind::checkpoints),
    transfer("ckpt_flush", "ckpt.flush", Resource::storage_write, StateKind::checkpoints),
    transfer("ckpt_read", "ckpt.read", Resource::storage_read, StateKind::checkpoints),
    transfer("ckpt_load", "ckpt.load", Resource::h2d, StateKind::checkpoints),
    transfer("acts_write", "acts.write", Resource::d2h, StateKind::acts),
    transfer("acts_flush", "acts.flush", Resource::storage_write, StateKind::acts),
    transfer("acts_read", "acts.read", Resource::storage_read, StateKind::acts),
    transfer("acts_load", "acts.load", Resource::h2d, StateKind::acts),
    {"grad_zero", "grad.zero", true, Resource::compute, StateKind::none, {wr(Role::grad)}, 1},
    {"embed_forward",
     "embed.fwd",
     false,
     Resource::compute,
     StateKind::none,
     {rd(Role::params), rd(Role::tokens), wr(Role::output)},
     3},
    {"block_forward",
     "fwd",
     false,
     Resource::compute,
     StateKind::none,
     {rd(Role::params), rd(Role::input), wr(Role::output), wr(Role::saved, true)},
     4},
    {"head_loss",
     "loss",
     false,
     Resource::compute,
     StateKind::none,
     {rd(Role::input), rd(Role::params), rd(Role::tokens), wr(Role::dact), rw(Role::grad),
      wr(Role::losses)},
     6},
    {"block_backward",
     "bwd",
     false,
     Resource::compute,
     StateKind::none,
     {rd(Role::params), rd(Role::input), rw(Role::dact), acc(Role::grad), rd(Role::saved, true)},
     5},
    {"embed_backward",
     "embed.bwd",
     false,
     Resource::compute,
     StateKind::none,
     {rd(Role::dact), rd(Role::tokens), rw(Role::grad)},
     3},
    {"grad_accumulate",
     "acc",
     false,
     Resource::cpu_optim,
     StateKind::none,
     {rd(Role::src), acc(Role::grad)},
     2},
    {"grad_sumsq",
     "sumsq",
     true,
     Resource::cpu_optim,
     StateKind::none,
     {rd(Role::grad), wr(Role::sums)},
     2},
    {"grad_norm",
     "grad.norm",
     false,
     Resource::cpu_optim,
     StateKind::none,
     {rd(Role::sums), wr(Role::clip)},
     2},
    {"block_step",
     "adamw",
     false,
     Resource::cpu_optim,
     StateKind::none,
     {rd(Role::grad), upd(Role::state), wr(Role::params), rd(Role::clip, true),
      wr(Role::state_out, true)},
     5},
    {"embed_step",
     "adamw",
     true,
     Resource::cpu_optim,
     StateKind::none,
     {rd(Role::grad), rd(Role::clip), rw(Role::state), wr(Role::params)},
     4},
    {"grad_allreduce", "allreduce", true, Resource::net, StateKind::none, {rw(Role::grad)}, 1},
    {"grad_reduce_scatter",
     "reduce.scatter",
     true,
     Resource::net,
     StateKind::none,
     {rw(Role::grad)},
     1},
    {"param_allgather", "allgather", true, Resource::net, StateKind::none, {rw(Role::params)}, 1},
    {"norm_allreduce",
     "norm.allreduce",
     false,
     Resource::net,
     StateKind::none,
     {rw(Role::sums)},
     1},
    {"param_gather",
     "gather.params",
     true,
     Resource::net,
     StateKind::none,
     {rd(Role::src), wr(Role::dst)},
     2},
    {"grad_reduce_scatter_device",
     "reduce.scatter.dev",
     true,
     Resource::net,
     StateKind::none,
     {rw(Role::grad)},
     1,
     true},
    {"param_allgather_device",
     "allgather.dev",
     true,
     Resource::net,
     StateKind::none,
     {rw(Role::params)},
     1,
     true},
    {"grad_allreduce_device",
     "allreduce.dev",
     true,
     Resource::net,
     StateKind::none,
     {rw(Role::grad)},
     1,
     true},
}};
static_assert(static_cast<int>(TaskKind::grad_allreduce_device) + 1 == kTaskKindCount);
// is_transfer (task_kind.h) says "the kinds up to acts_load": the table agrees.
constexpr bool transfers_lead() {
  for (int k = 0; k < kTaskKindCount; ++k) {
    if ((kKinds[static_cast<size_t>(k)].moves != StateKind::none) !=
        is_transfer(static_cast<TaskKind>(k))) {
      return false;
    }
  }
  return true;
}
static_assert(transfers_lead(), "the transfer kinds must come first, ending with acts_load");

const KindInfo& info(TaskKind k) {
  return kKinds[static_cast<size_t>(k)];
}

bool access_fits(Access a, bool reads, bool writes) {
  switch (a) {
    case Access::read:
      return reads && !writes;
    case Access::write:
      return writes && !reads;
    case Access::read_write:
      return reads && writes;
    case Access::write_maybe_read:
      return writes;
    case Access::read_maybe_write:
      return reads;
  }
  return false;
}

const char* access_name(Access a) {
  switch (a) {
    case Access::read:
      return "read";
    case Access::write:
      return "written";
    case Access::read_write:
      return "read and written";
    case Access::write_maybe_read:
      return "written";
    case Access::read_maybe_write:
      return "read";
  }
  return "?";
}

// "" when task t fits its kind's signature, else why not.
std::string signature_mismatch(const Task& t) {
  if (static_cast<int>(t.kind) >= kTaskKindCount) return "unknown kind";
  const KindInfo& k = info(t.kind);
  std::array<bool, kRoleCount> reads{}, writes{}, allowed{};
  for (int i = 0; i < k.role_count; ++i) allowed[static_cast<size_t>(k.roles[i].role)] = true;
  for (const SlotUse& u : t.uses) {
    const auto r = static_cast<size_t>(u.role);
    if (r >= allowed.size() || !allowed[r]) {
      return std::string("uses a slot as '") + role_name(u.role) + "', which " + k.name +
             " does not have";
    }
    (u.write ? writes : reads)[r] = true;
  }
  for (int i = 0; i < k.role_count; ++i) {
    const RoleSpec& s = k.roles[i];
    const auto r = static_cast<size_t>(s.role);
    if (!reads[r] && !writes[r]) {
      if (s.optional) continue;
      return std::string("has no '") + role_name(s.role) + "' slot";
    }
    if (!access_fits(s.access, reads[r], writes[r])) {
      return std::string("'") + role_name(s.role) + "' must be " + access_name(s.access);
    }
  }
  return "";
}

// Note [Where a task's slots live]: the tier a slot used in `role` by a task of kind k must be
// in, on a device whose compute does not read host memory.
Tier reached_tier(TaskKind k, Role role) {
  if (info(k).device_memory) return Tier::device;
  switch (info(k).resource) {
    case Resource::compute:
      // The head copies its per-position losses into the host slot on the compute stream: a
      // copy, which a GPU's compute stream may make. Every op reads and writes device memory.
      return role == Role::losses ? Tier::host : Tier::device;
    case Resource::h2d:
      return role == Role::src ? Tier::host : Tier::device;
    case Resource::d2h:
      return role == Role::src ? Tier::device : Tier::host;
    case Resource::storage_read:
      return role == Role::src ? Tier::storage : Tier::host;
    case Resource::storage_write:
      return role == Role::src ? Tier::host : Tier::storage;
    case Resource::cpu_optim:
    case Resource::net:  // collectives over host buffers (MPI), but for device_memory kinds
      return Tier::host;
  }
  return Tier::host;
}

}  // namespace

const char* task_kind_name(TaskKind k) {
  return static_cast<int>(k) < kTaskKindCount ? info(k).name : "?";
}

const char* role_name(Role r) {
  static constexpr std::array<const char*, kRoleCount> kNames = {
      "unspecified", "src",    "dst",    "params", "input", "output", "saved",    "grad",
      "dact",        "tokens", "losses", "state",  "clip",  "sums",   "state_out"};
  static_assert(static_cast<int>(Role::state_out) + 1 == kRoleCount);
  return static_cast<int>(r) < kRoleCount ? kNames[static_cast<size_t>(r)] : "?";
}

const char* kind_label(TaskKind k) {
  return info(k).label;
}

bool kind_label_names_group(TaskKind k) {
  return info(k).group_label;
}

Resource kind_resource(TaskKind k) {
  if (static_cast<int>(k) >= kTaskKindCount) return static_cast<Resource>(kResourceCount);
  return info(k).resource;
}

StateKind moved_state(TaskKind k) {
  return info(k).moves;
}

int32_t slot_of(const Task& t, Role role) {
  for (const SlotUse& u : t.uses) {
    if (u.role == role) return u.slot;
  }
  return -1;
}

bool reads_role(const Task& t, Role role) {
  for (const SlotUse& u : t.uses) {
    if (u.role == role && !u.write) return true;
  }
  return false;
}

Status check_task_signatures(const Plan& plan) {
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const std::string why = signature_mismatch(plan.tasks[i]);
    if (!why.empty()) {
      return invalid_argument("plan: task #" + std::to_string(i) + " " +
                              plan.describe(static_cast<int32_t>(i)) + " of kind " +
                              task_kind_name(plan.tasks[i].kind) + " " + why);
    }
  }
  return Status::ok_status();
}

Status check_task_tiers(const Plan& plan) {
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const Task& t = plan.tasks[i];
    for (const SlotUse& u : t.uses) {
      if (u.slot < 0 || u.slot >= static_cast<int32_t>(plan.slots.size())) continue;  // checker
      const Tier want = reached_tier(t.kind, u.role);
      const Tier have = plan.slots[static_cast<size_t>(u.slot)].tier;
      if (have == want) continue;
      return invalid_argument("plan: task #" + std::to_string(i) + " " +
                              plan.describe(static_cast<int32_t>(i)) + " uses " +
                              plan.describe_slot(u.slot) + " as '" + role_name(u.role) +
                              "', but a " + resource_name(t.resource()) + " task reaches only " +
                              tier_name(want) + " memory there (Note [Where a task's slots live])");
    }
  }
  return Status::ok_status();
}

}  // namespace strata
