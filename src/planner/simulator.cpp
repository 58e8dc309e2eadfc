#include "planner/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "sched/happens_before.h"
#include "sched/plan_checker.h"

namespace strata {

CostContext cost_context(const ScheduleSpec& s, double tokens) {
  CostContext c;
  c.tokens = tokens;
  c.block_fwd_flops = s.block_fwd_flops;
  c.ranks = s.ranks;
  if (trained_elems(s) > 0) {  // Note [Frozen base]: the state is the trained elements'
    c.optim_bytes_per_param =
        static_cast<double>(s.block_optim_bytes) / static_cast<double>(trained_elems(s));
  }
  return c;
}

SimOptions sim_options(const HardwareProfile& p) {
  SimOptions o;
  o.shared_cores = p.shared_cores;
  o.compute_speed = p.compute_shared_speed;
  o.optim_speed = p.optim_shared_speed;
  o.io_s_per_byte = p.shared_cores ? p.io_s_per_byte : 0;
  return o;
}

std::vector<bool> weights_reused(const Plan& plan) {
  std::vector<bool> out(plan.tasks.size(), false);
  int32_t block = -1, params = -1;  // of the last block task on the compute queue
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const Task& t = plan.tasks[i];
    if (t.resource() != Resource::compute || t.block < 0 ||
        (t.kind != TaskKind::block_forward && t.kind != TaskKind::block_backward)) {
      continue;
    }
    const int32_t slot = slot_of(t, Role::params);
    out[i] = slot >= 0 && t.block == block && slot == params;
    block = t.block;
    params = slot;
  }
  return out;
}

namespace {

double div_or_zero(double a, double b) {
  return b > 0 ? a / b : 0;
}

// Bytes of the slots a task writes with `role` (all its writes when role is unspecified).
double written_bytes(const Plan& plan, const Task& t, Role role = Role::unspecified) {
  int64_t b = 0;
  for (const SlotUse& u : t.uses) {
    if (u.write && (role == Role::unspecified || u.role == role) && u.slot >= 0 &&
        u.slot < static_cast<int32_t>(plan.slots.size())) {
      b += plan.slots[static_cast<size_t>(u.slot)].bytes;
    }
  }
  return static_cast<double>(b);
}

// Compute rates at one micro-batch size: plain, and for tasks whose weights were just used.
struct ComputeRates {
  double fwd = 0, bwd = 0, head = 0;
  double fwd_reused = 0, bwd_reused = 0;
};

ComputeRates compute_rates(const HardwareProfile& p, double tokens) {
  ComputeRates r;
  r.fwd = rate_at(p.block_fwd, tokens);
  r.bwd = rate_at(p.block_bwd, tokens);
  r.head = rate_at(p.head, tokens);
  const auto speedup = [tokens](const RateTable& t) {
    return t.empty() ? 1.0 : rate_at(t, tokens);
  };
  r.fwd_reused = r.fwd * speedup(p.block_fwd_reuse);
  r.bwd_reused = r.bwd * speedup(p.block_bwd_reuse);
  return r;
}

double block_backward_s(const Plan& plan, const Task& t, const HardwareProfile& p,
                        const CostContext& ctx, double fwd_rate, double bwd_rate) {
  double s = 0;
  if (t.fused) {
    s = div_or_zero(t.flops, bwd_rate);
  } else {
    // The recompute is a forward: it runs at the forward's rate.
    const double re = std::min(t.flops, ctx.block_fwd_flops);
    s = div_or_zero(re, fwd_rate) + div_or_zero(t.flops - re, bwd_rate);
  }
  // A fresh gradient (written, not accumulated into) is zeroed first.
  if (slot_of(t, Role::grad) >= 0 && !reads_role(t, Role::grad)) {
    s += div_or_zero(written_bytes(plan, t, Role::grad), p.memset_bytes_per_s);
  }
  return s;
}

double compute_task_s(const Plan& plan, const Task& t, bool reused, const HardwareProfile& p,
                      const CostContext& ctx, const ComputeRates& r) {
  const double fwd = reused ? r.fwd_reused : r.fwd, bwd = reused ? r.bwd_reused : r.bwd;
  double s = p.task_overhead_s;
  switch (t.kind) {
    case TaskKind::embed_forward:
    case TaskKind::embed_backward:
      return s + p.embed_s_per_token * ctx.tokens;
    case TaskKind::block_forward:
      return s + div_or_zero(t.flops, fwd);
    case TaskKind::block_backward:
      return s + block_backward_s(plan, t, p, ctx, fwd, bwd);
    case TaskKind::head_loss:
      return s + div_or_zero(t.flops, r.head);
    case TaskKind::grad_zero:
      return s + div_or_zero(written_bytes(plan, t), p.memset_bytes_per_s);
    default:
      return s + div_or_zero(t.flops, fwd);
  }
}

}  // namespace

std::vector<double> task_durations(const Plan& plan, const HardwareProfile& p,
                                   const CostContext& ctx) {
  const double read_rate =
      ctx.read_bytes_per_s > 0 ? ctx.read_bytes_per_s : p.storage_read_bytes_per_s();
  const double write_rate =
      ctx.write_bytes_per_s > 0 ? ctx.write_bytes_per_s : p.storage_write_bytes_per_s();
  const ComputeRates rates = compute_rates(p, ctx.tokens);
  const std::vector<bool> reused = weights_reused(plan);
  std::vector<double> d(plan.tasks.size(), 0.0);
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const Task& t = plan.tasks[i];
    const double bytes = static_cast<double>(t.bytes);
    double s = 0;
    switch (t.resource()) {
      case Resource::compute:
        s = compute_task_s(plan, t, reused[i], p, ctx, rates);
        break;
      case Resource::h2d:
        s = p.link_latency_s + div_or_zero(bytes, p.h2d_bytes_per_s);
        break;
      case Resource::d2h:
        s = p.link_latency_s + div_or_zero(bytes, p.d2h_bytes_per_s);
        break;
      case Resource::storage_read:
        s = p.storage_latency_s + div_or_zero(bytes, read_rate);
        break;
      case Resource::storage_write:
        s = p.storage_latency_s + div_or_zero(bytes, write_rate);
        break;
      case Resource::cpu_optim:
        s = p.optim_latency_s;
        if (t.kind == TaskKind::block_step || t.kind == TaskKind::embed_step) {
          s += div_or_zero(bytes / ctx.optim_bytes_per_param, p.optim_params_per_s);
        } else if (t.kind == TaskKind::grad_accumulate || t.kind == TaskKind::grad_sumsq) {
          s += div_or_zero(bytes, p.reduce_bytes_per_s);
        }
        break;
      case Resource::net: {
        // Note [Deterministic all-reduce]: an all-reduce is a reduce-scatter, then an all-gather,
        // each sending (N-1)/N of the buffer (Note [Sharded optimizer state]: the sharded
        // gradients and params take one of the two).
        const bool all_reduce =
            t.kind == TaskKind::grad_allreduce || t.kind == TaskKind::grad_allreduce_device;
        const double halves = all_reduce ? 2.0 : 1.0;
        const double sent = halves * (ctx.ranks - 1) / std::max(ctx.ranks, 1) * bytes;
        s = p.net_latency_s + div_or_zero(sent, p.net_bytes_per_s);
        break;
      }
    }
    d[i] = s;
  }
  return d;
}

namespace {

// The roofline: the busiest resource's work (compute and the CPU optimizer counted as one when
// they share the cores), and which resource that is.
void set_roofline(const SimOptions& opt, SimResult& out) {
  const int kCompute = static_cast<int>(Resource::compute),
            kOptim = static_cast<int>(Resource::cpu_optim);
  double roof = -1;
  for (int r = 0; r < kResourceCount; ++r) {
    if (opt.shared_cores && r == kOptim) continue;
    double w = out.work_s[r];
    if (opt.shared_cores && r == kCompute) w += out.work_s[kOptim];
    if (w > roof) {
      roof = w;
      out.bound = static_cast<Resource>(r);
    }
  }
  out.roofline_s = std::max(roof, 0.0);
}

// Each resource's pace while the tasks in `active` run (Note [Shared cores]).
std::array<double, kResourceCount> paces(const Plan& plan, const std::vector<double>& dur,
                                         const std::array<int32_t, kResourceCount>& active,
                                         const SimOptions& opt) {
  const int kCompute = static_cast<int>(Resource::compute),
            kOptim = static_cast<int>(Resource::cpu_optim);
  std::array<double, kResourceCount> pace;
  pace.fill(1.0);
  if (opt.shared_cores && active[kCompute] >= 0 && active[kOptim] >= 0) {
    pace[kCompute] = opt.compute_speed;
    pace[kOptim] = opt.optim_speed;
  }
  if (opt.io_s_per_byte > 0 && active[kCompute] >= 0) {
    double bytes_per_s = 0;
    for (Resource r : {Resource::storage_read, Resource::storage_write}) {
      const int32_t i = active[static_cast<int>(r)];
      if (i >= 0 && dur[static_cast<size_t>(i)] > 0) {
        bytes_per_s += static_cast<double>(plan.tasks[static_cast<size_t>(i)].bytes) /
                       dur[static_cast<size_t>(i)];
      }
    }
    pace[kCompute] *= std::max(1 - opt.io_s_per_byte * bytes_per_s, kMinComputePace);
  }
  return pace;
}

// invalid_argument unless dur holds one non-negative duration per task.
Status check_durations(const Plan& plan, const std::vector<double>& dur) {
  const int32_t n = static_cast<int32_t>(plan.tasks.size());
  if (dur.size() != plan.tasks.size()) {
    return invalid_argument("simulate: " + std::to_string(dur.size()) + " durations for " +
                            std::to_string(n) + " tasks");
  }
  for (int32_t i = 0; i < n; ++i) {
    if (dur[static_cast<size_t>(i)] < 0) {
      return invalid_argument("simulate: task " + plan.describe(i) + " has a negative duration");
    }
  }
  return Status();
}

// Why no task can run although some are left: a cycle through the first task that never started.
Status stuck_error(const Plan& plan, const std::vector<TaskTiming>& timing) {
  for (size_t i = 0; i < timing.size(); ++i) {
    if (timing[i].start_s < 0) {
      return invalid_argument("simulate: the plan's happens-before graph has a cycle through " +
                              plan.describe(static_cast<int32_t>(i)));
    }
  }
  return invalid_argument("simulate: stuck with tasks left");
}

// The run's totals, once every task has its timing: wall time (`end_s` of the last), each
// resource's busy time and work, the roofline, and the plan's peak bytes per tier.
void finish_result(const Plan& plan, const std::vector<double>& dur,
                   std::vector<TaskTiming>& timing, double end_s, const SimOptions& opt,
                   SimResult& out) {
  ExecutionReport& rep = out.report;
  rep.wall_s = end_s;
  out.iter_s = end_s;
  for (size_t i = 0; i < timing.size(); ++i) {
    const auto r = static_cast<size_t>(plan.tasks[i].resource());
    rep.busy_s[r] += timing[i].end_s - timing[i].start_s;
    out.work_s[r] += dur[i];
  }
  set_roofline(opt, out);
  if (opt.record_trace) rep.timings = std::move(timing);
  const PlanStats st = plan_stats(plan);
  out.peak_bytes = st.bytes_per_tier;
}

}  // namespace

Result<SimResult> simulate(const Plan& plan, const std::vector<double>& dur,
                           const SimOptions& opt) {
  STRATA_RETURN_IF_ERROR(check_durations(plan, dur));
  const int32_t n = static_cast<int32_t>(plan.tasks.size());
  // The executor's rule: a task starts when its queue predecessor and its deps have finished.
  STRATA_ASSIGN_OR_RETURN(const HappensBefore edges, happens_before_edges(plan));
  std::vector<int64_t> pending(static_cast<size_t>(n), 0);
  for (int32_t i = 0; i < n; ++i) {
    pending[static_cast<size_t>(i)] = static_cast<int64_t>(edges.predecessors(i).size());
  }

  std::vector<TaskTiming> timing(static_cast<size_t>(n), TaskTiming{-1, -1});
  std::array<size_t, kResourceCount> head{};
  std::array<int32_t, kResourceCount> active;
  active.fill(-1);
  std::array<double, kResourceCount> remaining{};
  double now = 0;
  int32_t done = 0;
  while (true) {
    for (int r = 0; r < kResourceCount; ++r) {
      const std::vector<int32_t>& queue = edges.queue(static_cast<Resource>(r));
      if (active[r] >= 0 || head[r] >= queue.size()) continue;
      const int32_t i = queue[head[r]];
      if (pending[static_cast<size_t>(i)] != 0) continue;
      ++head[r];
      active[r] = i;
      remaining[r] = dur[static_cast<size_t>(i)];
      timing[static_cast<size_t>(i)].start_s = now;
    }
    if (done == n) break;
    const std::array<double, kResourceCount> speed = paces(plan, dur, active, opt);
    double dt = std::numeric_limits<double>::infinity();
    for (int r = 0; r < kResourceCount; ++r) {
      if (active[r] >= 0) dt = std::min(dt, remaining[r] / speed[r]);
    }
    if (!std::isfinite(dt)) return stuck_error(plan, timing);
    now += dt;
    for (int r = 0; r < kResourceCount; ++r) {
      if (active[r] < 0) continue;
      // The task(s) that set dt finish now; floating error must not leave a sliver behind.
      if (remaining[r] / speed[r] <= dt * (1 + 1e-12) + 1e-15) {
        const int32_t i = active[r];
        timing[static_cast<size_t>(i)].end_s = now;
        active[r] = -1;
        ++done;
        for (int32_t d : edges.successors(i)) --pending[static_cast<size_t>(d)];
      } else {
        remaining[r] -= dt * speed[r];
      }
    }
  }

  SimResult out;
  finish_result(plan, dur, timing, now, opt, out);
  return out;
}

}  // namespace strata
