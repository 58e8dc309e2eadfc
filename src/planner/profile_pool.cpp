#include "planner/profile_pool.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace strata {

std::optional<TimingClass> timing_class(const Task& t) {
  switch (t.kind) {
    case TaskKind::block_forward:
      return TimingClass::fwd;
    case TaskKind::block_backward:
      return t.fused ? TimingClass::fused_bwd : TimingClass::bwd;
    case TaskKind::head_loss:
      return TimingClass::head;
    case TaskKind::embed_forward:
    case TaskKind::embed_backward:
      return TimingClass::embed;
    case TaskKind::grad_zero:  // a block's gradient: the embed group's is too small to time
      return t.block >= 0 ? std::optional<TimingClass>(TimingClass::zero) : std::nullopt;
    case TaskKind::block_step:
    case TaskKind::embed_step:
      return TimingClass::step;
    case TaskKind::grad_accumulate:
    case TaskKind::grad_sumsq:
      return TimingClass::reduce;
    default:
      break;
  }
  if (t.bytes > 0 && t.resource() == Resource::h2d) return TimingClass::h2d;
  if (t.bytes > 0 && t.resource() == Resource::d2h) return TimingClass::d2h;
  return std::nullopt;
}

namespace {

bool is_compute(TimingClass c) {
  return c == TimingClass::fwd || c == TimingClass::bwd || c == TimingClass::fused_bwd ||
         c == TimingClass::head;
}

// Bytes of the slots a task writes.
double written_slot_bytes(const Plan& plan, const Task& t) {
  double b = 0;
  for (const SlotUse& u : t.uses) {
    if (u.write) b += static_cast<double>(plan.slots[static_cast<size_t>(u.slot)].bytes);
  }
  return b;
}

}  // namespace

double timing_value(TimingClass c, const ProfileRunTimings& r, const Task& t, double seconds,
                    double tokens) {
  const double s = std::max(seconds, 1e-9);
  switch (c) {
    case TimingClass::embed:
      return s / tokens;
    case TimingClass::zero:
      return written_slot_bytes(r.plan, t) / s;
    case TimingClass::step:
      return static_cast<double>(t.bytes) * static_cast<double>(trained_elems(r.spec)) /
             static_cast<double>(std::max<int64_t>(r.spec.block_optim_bytes, 1)) / s;
    case TimingClass::h2d:
    case TimingClass::d2h:
    case TimingClass::reduce:
      return static_cast<double>(t.bytes) / s;
    default:
      return seconds;
  }
}

bool ran_alone(TimingClass c, const TaskSample& s) {
  const double tol = 0.02 * s.seconds;
  if (c == TimingClass::step || c == TimingClass::reduce) return s.beside_compute_s <= tol;
  return s.beside_optim_s <= tol && s.storage_bytes == 0;
}

// ---- Pooling ------------------------------------------------------------------------------------

namespace {

struct Key {
  ProfileRunKind kind = ProfileRunKind::horizontal;
  int64_t B = 1;
  TimingClass cls = TimingClass::fwd;
  bool reused = false;
  auto operator<=>(const Key&) const = default;
};

// Timings of tasks that ran alone, per class and per round (Note [Robust timings]).
class Pools {
 public:
  void add(const Key& k, int round, double v) {
    auto& rounds = pools_[k];
    if (rounds.size() <= static_cast<size_t>(round)) rounds.resize(static_cast<size_t>(round) + 1);
    rounds[static_cast<size_t>(round)].push_back(v);
  }
  // Over every round.
  TimingSummary summary(const Key& k) const { return summarize_timings(values(k, -1)); }
  // Over every run kind and B of a class (the rates that do not depend on them).
  TimingSummary summary_of(TimingClass c) const {
    std::vector<double> all;
    for (const auto& [k, rounds] : pools_) {
      if (k.cls != c || k.kind == ProfileRunKind::vertical_storage) continue;
      for (const auto& r : rounds) all.insert(all.end(), r.begin(), r.end());
    }
    return summarize_timings(std::move(all));
  }
  // The mean of one round's timings (0 without any).
  double round_mean(const Key& k, int round) const {
    return summarize_timings(values(k, round)).mean;
  }
  void totals(int64_t& kept, int64_t& rejected) const {
    kept = rejected = 0;
    for (const auto& [k, rounds] : pools_) {
      const TimingSummary s = summary(k);
      kept += s.kept;
      rejected += s.rejected;
    }
  }

 private:
  std::vector<double> values(const Key& k, int round) const {
    std::vector<double> all;
    auto it = pools_.find(k);
    if (it == pools_.end()) return all;
    for (size_t r = 0; r < it->second.size(); ++r) {
      if (round < 0 || static_cast<int>(r) == round) {
        all.insert(all.end(), it->second[r].begin(), it->second[r].end());
      }
    }
    return all;
  }
  std::map<Key, std::vector<std::vector<double>>> pools_;
};

Key key_of(const ProfileRunTimings& r, TimingClass c, const TaskSample& s) {
  return {r.kind, r.B, c, r.reused[static_cast<size_t>(s.task)]};
}

void pool_run(const ProfileRunTimings& r, int round, double seq_len, Pools& pools) {
  const double tokens = static_cast<double>(r.B) * seq_len;
  for (const std::vector<TaskSample>& step : r.steps) {
    for (const TaskSample& s : step) {
      const Task& t = r.plan.tasks[static_cast<size_t>(s.task)];
      const std::optional<TimingClass> c = timing_class(t);
      if (!c || !ran_alone(*c, s)) continue;
      pools.add(key_of(r, *c, s), round, timing_value(*c, r, t, s.seconds, tokens));
    }
  }
}

// ---- Contention ---------------------------------------------------------------------------------

// Compute tasks beside the optimizer against their time alone, and optimizer steps beside
// compute against theirs (Note [Shared cores]).
void shared_pace_samples(const ProfileRunTimings& r, const Pools& pools,
                         std::vector<Contended>& compute, std::vector<Contended>& optim) {
  const double step_rate = pools.summary_of(TimingClass::step).mean;
  for (const std::vector<TaskSample>& step : r.steps) {
    for (const TaskSample& s : step) {
      const Task& t = r.plan.tasks[static_cast<size_t>(s.task)];
      const std::optional<TimingClass> c = timing_class(t);
      if (!c || s.storage_bytes > 0) continue;
      if (is_compute(*c) && s.beside_optim_s > 0) {
        const double a = pools.summary(key_of(r, *c, s)).mean;
        if (a > 0) compute.push_back({s.seconds, a, s.beside_optim_s});
      } else if (*c == TimingClass::step && s.beside_compute_s > 0 && step_rate > 0) {
        const double a = timing_value(*c, r, t, 1.0, 1.0) / step_rate;  // parameters / rate
        optim.push_back({s.seconds, a, s.beside_compute_s});
      }
    }
  }
}

// Compute tasks of the run with state on storage against the same tasks of the run on host
// (their optimizer contention taken off at the fitted pace): the time storage traffic took.
void io_cost_samples(const ProfileRunTimings& r, const Pools& pools, double compute_pace,
                     std::vector<Contended>& out) {
  for (const std::vector<TaskSample>& step : r.steps) {
    for (const TaskSample& s : step) {
      const Task& t = r.plan.tasks[static_cast<size_t>(s.task)];
      const std::optional<TimingClass> c = timing_class(t);
      if (!c || !is_compute(*c)) continue;
      Key k = key_of(r, *c, s);
      k.kind = ProfileRunKind::vertical;
      const double a = pools.summary(k).mean;
      if (a <= 0) continue;
      out.push_back({s.seconds, a + (1 - compute_pace) * s.beside_optim_s, s.storage_bytes});
    }
  }
}

// ---- The profile's figures ----------------------------------------------------------------------

// The compute tables at micro-batch size B from a horizontal run: block tasks with weights not
// just used; a backward there also zeroes its fresh gradient, taken off at the memset rate.
void compute_tables(const Pools& pools, const ProfileRunTimings& h, double tokens,
                    HardwareProfile& prof) {
  const auto mean = [&](TimingClass c) {
    return pools.summary({ProfileRunKind::horizontal, h.B, c, false}).mean;
  };
  const double f = mean(TimingClass::fwd);
  const double zero = static_cast<double>(h.spec.block_grad_bytes) / prof.memset_bytes_per_s;
  const double b = std::max(mean(TimingClass::bwd) - f - zero, 1e-9);
  prof.block_fwd.emplace_back(tokens, h.spec.block_fwd_flops / std::max(f, 1e-9));
  prof.block_bwd.emplace_back(tokens, h.spec.block_bwd_flops / b);
  prof.head.emplace_back(tokens, h.spec.head_flops / std::max(mean(TimingClass::head), 1e-9));
}

// The speed-ups of block tasks with weights just used (Note [Weights reused]), measured within
// one vertical run: its tasks with weights just used against its others (each block's first
// micro-batch), so that the machine's speed, which drifts between runs by as much as the effect,
// cancels out. A speed-up the timings cannot tell from 1 is recorded as 1; a disturbed one is
// left out (the table interpolates over it).
void reuse_speedups(const Pools& pools, const ProfileRunTimings& v, double tokens,
                    HardwareProfile& prof) {
  const auto s = [&](TimingClass c, bool reused) {
    return pools.summary({ProfileRunKind::vertical, v.B, c, reused});
  };
  const TimingSummary fc = s(TimingClass::fwd, false), fr = s(TimingClass::fwd, true);
  const TimingSummary bc = s(TimingClass::bwd, false), br = s(TimingClass::bwd, true);
  if (fc.kept < 2 || fr.kept < 2 || bc.kept < 2 || br.kept < 2) return;
  const double fwd = significant_speedup(fc.mean, fc.sem, fr.mean, fr.sem);
  // The backward proper: the backward task less its recompute (a forward of the same kind).
  const double bwd = significant_speedup(bc.mean - fc.mean, std::hypot(bc.sem, fc.sem),
                                         br.mean - fr.mean, std::hypot(br.sem, fr.sem));
  if (fwd <= 0 || bwd <= 0) return;
  prof.block_fwd_reuse.emplace_back(tokens, fwd);
  prof.block_bwd_reuse.emplace_back(tokens, bwd);
}

// Rates that do not depend on B, pooled over every run.
void pooled_rates(const Pools& pools, HardwareProfile& prof) {
  const auto rate = [&pools](TimingClass c, double fallback) {
    const double m = pools.summary_of(c).mean;
    return m > 0 ? m : fallback;
  };
  prof.embed_s_per_token = pools.summary_of(TimingClass::embed).mean;
  prof.memset_bytes_per_s = rate(TimingClass::zero, 1e10);
  prof.h2d_bytes_per_s = rate(TimingClass::h2d, 1e10);
  prof.d2h_bytes_per_s = rate(TimingClass::d2h, 1e10);
  prof.optim_params_per_s = rate(TimingClass::step, 1e8);
  prof.reduce_bytes_per_s = rate(TimingClass::reduce, 1e10);
}

const ProfileRunTimings* find_run(const ProfileRuns& m, ProfileRunKind kind, int64_t B) {
  for (const ProfileRunTimings& r : m.runs) {
    if (r.kind == kind && r.B == B) return &r;
  }
  return nullptr;
}

// How far apart the rounds were: each round's time for one task of every block class (both
// orders, every B), the slowest round's over the fastest's, minus 1.
double round_spread(const Pools& pools, int rounds) {
  double lo = 0, hi = 0;
  for (int round = 0; round < rounds; ++round) {
    double total = 0;
    for (int64_t B : kProfileMicroBatchSizes) {
      for (TimingClass c : {TimingClass::fwd, TimingClass::bwd}) {
        total += pools.round_mean({ProfileRunKind::horizontal, B, c, false}, round) +
                 pools.round_mean({ProfileRunKind::vertical, B, c, true}, round);
      }
    }
    lo = round == 0 ? total : std::min(lo, total);
    hi = round == 0 ? total : std::max(hi, total);
  }
  return lo > 0 ? hi / lo - 1 : 0;
}

}  // namespace

void fill_profile(const ProfileRuns& m, double seq_len, HardwareProfile& prof) {
  Pools pools;
  for (size_t i = 0; i < m.runs.size(); ++i) {
    if (m.runs[i].kind != ProfileRunKind::vertical_storage)
      pool_run(m.runs[i], m.round_of[i], seq_len, pools);
  }
  pooled_rates(pools, prof);
  for (int64_t B : kProfileMicroBatchSizes) {
    const double tokens = static_cast<double>(B) * seq_len;
    if (const ProfileRunTimings* h = find_run(m, ProfileRunKind::horizontal, B)) {
      compute_tables(pools, *h, tokens, prof);
    }
    if (const ProfileRunTimings* v = find_run(m, ProfileRunKind::vertical, B)) {
      reuse_speedups(pools, *v, tokens, prof);
    }
  }
  std::vector<Contended> compute, optim, io;
  for (const ProfileRunTimings& r : m.runs) {
    if (r.kind != ProfileRunKind::vertical_storage) shared_pace_samples(r, pools, compute, optim);
  }
  prof.compute_shared_speed = fitted_pace(compute, 0.5);
  prof.optim_shared_speed = fitted_pace(optim, 0.5);
  for (const ProfileRunTimings& r : m.runs) {
    if (r.kind == ProfileRunKind::vertical_storage) {
      io_cost_samples(r, pools, prof.compute_shared_speed, io);
    }
  }
  prof.io_s_per_byte = fitted_cost(io);
  pools.totals(prof.measurement.samples, prof.measurement.rejected);
  prof.measurement.round_spread = round_spread(pools, m.rounds);
}

}  // namespace strata
