#include "plan/simulator.h"

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
  if (s.block_elems > 0) {
    c.optim_bytes_per_param =
        static_cast<double>(s.block_optim_bytes) / static_cast<double>(s.block_elems);
  }
  return c;
}

SimOptions sim_options(const HardwareProfile& p) {
  SimOptions o;
  o.shared_cores = p.shared_cores;
  o.shared_speed = p.shared_speed;
  return o;
}

namespace {

double div_or_zero(double a, double b) {
  return b > 0 ? a / b : 0;
}

}  // namespace

std::vector<double> task_durations(const Plan& plan, const HardwareProfile& p,
                                   const CostContext& ctx) {
  const double read_rate =
      ctx.read_bytes_per_s > 0 ? ctx.read_bytes_per_s : p.storage_read_bytes_per_s();
  const double write_rate =
      ctx.write_bytes_per_s > 0 ? ctx.write_bytes_per_s : p.storage_write_bytes_per_s();
  const double fwd_rate = rate_at(p.block_fwd, ctx.tokens);
  const double bwd_rate = rate_at(p.block_bwd, ctx.tokens);
  const double head_rate = rate_at(p.head, ctx.tokens);
  std::vector<double> d(plan.tasks.size(), 0.0);
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const Task& t = plan.tasks[i];
    const double bytes = static_cast<double>(t.bytes);
    double s = 0;
    switch (t.resource) {
      case Resource::compute:
        s = p.task_overhead_s;
        switch (t.kind) {
          case TaskKind::embed_forward:
          case TaskKind::embed_backward:
            s += p.embed_s_per_token * ctx.tokens;
            break;
          case TaskKind::block_forward:
            s += div_or_zero(t.flops, fwd_rate);
            break;
          case TaskKind::block_backward:
            if (t.fused) {
              s += div_or_zero(t.flops, bwd_rate);
            } else {
              // The recompute is a forward: it runs at the forward's rate.
              const double re = std::min(t.flops, ctx.block_fwd_flops);
              s += div_or_zero(re, fwd_rate) + div_or_zero(t.flops - re, bwd_rate);
            }
            break;
          case TaskKind::head_loss:
            s += div_or_zero(t.flops, head_rate);
            break;
          case TaskKind::grad_zero: {
            int64_t zb = 0;
            for (const SlotUse& u : t.uses) {
              if (u.write && u.slot >= 0 && u.slot < static_cast<int32_t>(plan.slots.size())) {
                zb += plan.slots[static_cast<size_t>(u.slot)].bytes;
              }
            }
            s += div_or_zero(static_cast<double>(zb), p.memset_bytes_per_s);
            break;
          }
          default:
            s += div_or_zero(t.flops, fwd_rate);
            break;
        }
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

}  // namespace

Result<SimResult> simulate(const Plan& plan, const std::vector<double>& dur,
                           const SimOptions& opt) {
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
  // The executor's rule: a task starts when its queue predecessor and its deps have finished.
  STRATA_ASSIGN_OR_RETURN(const HappensBefore edges, happens_before_edges(plan));
  std::vector<int64_t> pending(static_cast<size_t>(n), 0);
  for (int32_t i = 0; i < n; ++i) {
    pending[static_cast<size_t>(i)] = static_cast<int64_t>(edges.predecessors(i).size());
  }

  SimResult out;
  ExecutionReport& rep = out.report;
  std::vector<TaskTiming> timing(static_cast<size_t>(n), TaskTiming{-1, -1});
  std::array<size_t, kResourceCount> head{};
  std::array<int32_t, kResourceCount> active;
  active.fill(-1);
  std::array<double, kResourceCount> remaining{};
  const int kCompute = static_cast<int>(Resource::compute),
            kOptim = static_cast<int>(Resource::cpu_optim);
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
    std::array<double, kResourceCount> speed;
    speed.fill(1.0);
    if (opt.shared_cores && active[kCompute] >= 0 && active[kOptim] >= 0) {
      speed[kCompute] = speed[kOptim] = opt.shared_speed;
    }
    double dt = std::numeric_limits<double>::infinity();
    for (int r = 0; r < kResourceCount; ++r) {
      if (active[r] >= 0) dt = std::min(dt, remaining[r] / speed[r]);
    }
    if (!std::isfinite(dt)) {
      for (int32_t i = 0; i < n; ++i) {
        if (timing[static_cast<size_t>(i)].start_s < 0) {
          return invalid_argument("simulate: the plan's happens-before graph has a cycle through " +
                                  plan.describe(i));
        }
      }
      return invalid_argument("simulate: stuck with tasks left");
    }
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

  rep.wall_s = now;
  out.iter_s = now;
  for (int32_t i = 0; i < n; ++i) {
    const auto r = static_cast<size_t>(plan.tasks[static_cast<size_t>(i)].resource);
    rep.busy_s[r] += timing[static_cast<size_t>(i)].end_s - timing[static_cast<size_t>(i)].start_s;
    out.work_s[r] += dur[static_cast<size_t>(i)];
  }
  set_roofline(opt, out);
  if (opt.record_trace) rep.timings = std::move(timing);
  const PlanStats st = plan_stats(plan);
  out.peak_bytes = st.bytes_per_tier;
  return out;
}

}  // namespace strata
