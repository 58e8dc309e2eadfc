#include "planner/profile_measure.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

namespace strata {

std::vector<bool> within_fences(const std::vector<double>& values) {
  std::vector<bool> keep(values.size(), true);
  if (values.empty()) return keep;
  std::vector<double> v = values;
  std::sort(v.begin(), v.end());
  // Quartiles by linear interpolation between order statistics.
  const auto quantile = [&v](double q) {
    const double at = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(at);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (at - static_cast<double>(lo)) * (v[hi] - v[lo]);
  };
  const double q1 = quantile(0.25), q3 = quantile(0.75), iqr = q3 - q1;
  const double lo = q1 - 1.5 * iqr, hi = q3 + 1.5 * iqr;
  for (size_t i = 0; i < values.size(); ++i) keep[i] = values[i] >= lo && values[i] <= hi;
  return keep;
}

TimingSummary summarize_timings(std::vector<double> v) {
  TimingSummary out;
  const std::vector<bool> keep = within_fences(v);
  double sum = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (keep[i]) {
      sum += v[i];
      ++out.kept;
    } else {
      ++out.rejected;
    }
  }
  if (out.kept == 0) return out;
  const double n = static_cast<double>(out.kept);
  out.mean = sum / n;
  if (out.kept < 2) return out;
  double ss = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (keep[i]) ss += (v[i] - out.mean) * (v[i] - out.mean);
  }
  out.sem = std::sqrt(ss / (n - 1) / n);
  return out;
}

double significant_speedup(double a, double a_sem, double b, double b_sem) {
  if (a <= 0 || b <= 0) return 0;
  const double r = a / b;
  if (r < 0.5 || r > 2) return 0;
  const double rel = std::hypot(a_sem / a, b_sem / b);  // of the ratio, to first order
  return std::abs(r - 1) > 2 * rel ? r : 1.0;
}

namespace {

struct Interval {
  double start = 0, end = 0, bytes = 0;
};

// Tasks of one queue run one at a time, in order: their intervals are sorted and disjoint.
std::vector<Interval> queue_intervals(const Plan& plan, const ExecutionReport& rep, Resource r) {
  std::vector<Interval> out;
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    if (plan.tasks[i].resource() != r) continue;
    out.push_back(
        {rep.timings[i].start_s, rep.timings[i].end_s, static_cast<double>(plan.tasks[i].bytes)});
  }
  std::sort(out.begin(), out.end(),
            [](const Interval& a, const Interval& b) { return a.start < b.start; });
  return out;
}

// Seconds of [a, b) covered by `queue`, and the bytes its tasks moved in that time (each task's
// bytes spread evenly over its duration).
std::pair<double, double> covered(const std::vector<Interval>& queue, double a, double b) {
  double s = 0, bytes = 0;
  auto it = std::lower_bound(queue.begin(), queue.end(), a,
                             [](const Interval& x, double t) { return x.end <= t; });
  for (; it != queue.end() && it->start < b; ++it) {
    const double o = std::min(b, it->end) - std::max(a, it->start);
    if (o <= 0) continue;
    s += o;
    if (it->end > it->start) bytes += it->bytes * o / (it->end - it->start);
  }
  return {s, bytes};
}

}  // namespace

std::vector<TaskSample> task_samples(const Plan& plan, const ExecutionReport& rep) {
  std::vector<TaskSample> out;
  if (rep.timings.size() != plan.tasks.size()) return out;
  const std::vector<Interval> optim = queue_intervals(plan, rep, Resource::cpu_optim),
                              compute = queue_intervals(plan, rep, Resource::compute),
                              reads = queue_intervals(plan, rep, Resource::storage_read),
                              writes = queue_intervals(plan, rep, Resource::storage_write);
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const double a = rep.timings[i].start_s, b = rep.timings[i].end_s;
    TaskSample s;
    s.task = static_cast<int32_t>(i);
    s.seconds = b - a;
    s.beside_optim_s = covered(optim, a, b).first;
    s.beside_compute_s = covered(compute, a, b).first;
    s.storage_bytes = covered(reads, a, b).second + covered(writes, a, b).second;
    out.push_back(s);
  }
  return out;
}

double fitted_pace(const std::vector<Contended>& samples, double fallback) {
  std::vector<double> paces;
  for (const Contended& c : samples) {
    if (c.contended > 0 && c.contended >= 0.25 * c.seconds) {
      paces.push_back(1 - (c.seconds - c.alone_s) / c.contended);
    }
  }
  if (paces.empty()) return fallback;
  return std::clamp(summarize_timings(std::move(paces)).mean, 0.05, 1.0);
}

double fitted_cost(const std::vector<Contended>& samples) {
  std::vector<const Contended*> c;
  std::vector<double> per_unit;  // each sample's own estimate: what the fences judge
  for (const Contended& s : samples) {
    if (s.contended <= 0) continue;
    c.push_back(&s);
    per_unit.push_back((s.seconds - s.alone_s) / s.contended);
  }
  const std::vector<bool> keep = within_fences(per_unit);
  double lost = 0, units = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!keep[i]) continue;
    lost += c[i]->seconds - c[i]->alone_s;
    units += c[i]->contended;
  }
  return units > 0 ? std::max(lost / units, 0.0) : 0;
}

bool parse_proc_stat(const std::string& line, double ticks_per_s, CpuSnapshot& out) {
  std::istringstream in(line);
  std::string name;
  in >> name;
  if (name != "cpu" || ticks_per_s <= 0) return false;
  // user nice system idle iowait irq softirq steal (guest time is already in user)
  double f[8] = {0};
  for (double& x : f) {
    if (!(in >> x)) return false;
  }
  out.busy_s = (f[0] + f[1] + f[2] + f[5] + f[6]) / ticks_per_s;
  out.steal_s = f[7] / ticks_per_s;
  return true;
}

CpuSnapshot cpu_snapshot() {
  CpuSnapshot s;
  s.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::ifstream f("/proc/stat");
  std::string line;
  if (!std::getline(f, line)) return s;
  if (!parse_proc_stat(line, static_cast<double>(sysconf(_SC_CLK_TCK)), s)) return s;
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return s;
  const auto secs = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  s.own_s = secs(u.ru_utime) + secs(u.ru_stime);
  s.ok = true;
  return s;
}

MachineLoad machine_load(const CpuSnapshot& a, const CpuSnapshot& b, int cores) {
  MachineLoad m;
  const double span = (b.wall_s - a.wall_s) * std::max(cores, 1);
  if (!a.ok || !b.ok || span <= 0) return m;
  m.other_cpu = std::clamp(((b.busy_s - a.busy_s) - (b.own_s - a.own_s)) / span, 0.0, 1.0);
  m.steal = std::clamp((b.steal_s - a.steal_s) / span, 0.0, 1.0);
  return m;
}

double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  if (!(f >> l)) return -1;
  return l;
}

}  // namespace strata
