// The run report: run_report.h.
#include "report/run_report.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/file_util.h"
#include "core/json_util.h"
#include "report/svg_chart.h"

namespace strata::report {

namespace {

using json = nlohmann::json;

// The number at `key` (a path of object keys) of a line, or NaN when absent or not a number.
double field(const json& line, std::initializer_list<const char*> path) {
  const json* at = &line;
  for (const char* key : path) {
    if (!at->is_object()) return NAN;
    auto it = at->find(key);
    if (it == at->end()) return NAN;
    at = &*it;
  }
  return at->is_number() ? at->get<double>() : NAN;
}

// One series over steps (x = step + 1) of the field at `path`, scaled; only lines that have it.
Series over_steps(const MetricsFile& m, const std::string& name,
                  std::initializer_list<const char*> path, double scale = 1, bool markers = false) {
  Series s{name, {}, markers};
  for (const json& line : m.lines) {
    const double step = field(line, {"step"}), v = field(line, path);
    if (std::isfinite(step) && std::isfinite(v)) s.points.emplace_back(step + 1, v * scale);
  }
  return s;
}

std::vector<Series> non_empty(std::vector<Series> all) {
  std::vector<Series> out;
  for (Series& s : all) {
    if (!s.points.empty()) out.push_back(std::move(s));
  }
  return out;
}

// The resources named in busy_s, in first-seen order.
std::vector<std::string> resources(const MetricsFile& m) {
  std::vector<std::string> names;
  for (const json& line : m.lines) {
    auto it = line.find("busy_s");
    if (it == line.end() || !it->is_object()) continue;
    for (const auto& [k, v] : it->items()) {
      if (std::find(names.begin(), names.end(), k) == names.end()) names.push_back(k);
    }
  }
  return names;
}

std::vector<LineChart> charts(const MetricsFile& m) {
  std::vector<LineChart> out;
  out.push_back({"loss", "Loss", "step", "loss (nats per token)",
                 non_empty({over_steps(m, "training loss", {"loss"}),
                            over_steps(m, "validation loss", {"val_loss"}, 1, true)})});
  out.push_back({"lr", "Learning rate", "step", "learning rate",
                 non_empty({over_steps(m, "learning rate", {"lr"})})});
  Series skipped{"skipped step", {}, true};
  for (const json& line : m.lines) {
    if (line.value("skipped", false) && std::isfinite(field(line, {"step"}))) {
      skipped.points.emplace_back(field(line, {"step"}) + 1, 0);
    }
  }
  out.push_back({"grad_norm", "Gradient norm (before clipping)", "step", "global L2 norm",
                 non_empty({over_steps(m, "gradient norm", {"grad_norm"}), skipped})});
  out.push_back({"tokens_per_s", "Throughput", "step", "tokens / s",
                 non_empty({over_steps(m, "tokens/s", {"tokens_per_s"})})});
  out.push_back({"flops", "Model FLOP/s", "step", "TFLOP / s",
                 non_empty({over_steps(m, "model FLOP/s", {"model_flops_per_s"}, 1e-12)})});
  out.push_back({"bytes", "Bytes moved per step", "step", "GB per step",
                 non_empty({over_steps(m, "storage read", {"storage_read_bytes"}, 1e-9),
                            over_steps(m, "storage write", {"storage_write_bytes"}, 1e-9),
                            over_steps(m, "host to device", {"h2d_bytes"}, 1e-9),
                            over_steps(m, "device to host", {"d2h_bytes"}, 1e-9)})});
  std::vector<Series> busy = {over_steps(m, "step time", {"iter_s"}),
                              over_steps(m, "roofline", {"roofline_s"})};
  for (const std::string& r : resources(m)) {
    busy.push_back(over_steps(m, r + " busy", {"busy_s", r.c_str()}));
  }
  out.push_back({"busy", "Busy time per resource against the roofline", "step", "seconds per step",
                 non_empty(std::move(busy))});
  constexpr double kGiB = 1.0 / (1 << 30);
  out.push_back({"memory", "Peak memory per tier", "step", "GiB",
                 non_empty({over_steps(m, "device peak", {"peak_device_bytes"}, kGiB),
                            over_steps(m, "host peak", {"peak_host_bytes"}, kGiB),
                            over_steps(m, "device planned", {"planned_device_bytes"}, kGiB),
                            over_steps(m, "host planned", {"planned_host_bytes"}, kGiB),
                            over_steps(m, "device budget", {"device_budget_bytes"}, kGiB)})});
  Series stalls{"stall", {}, true}, writes{"write", {}, true};
  for (const json& line : m.lines) {
    auto it = line.find("checkpoints");
    if (it == line.end() || !it->is_array()) continue;
    for (const json& c : *it) {
      const double step = field(c, {"step"});
      if (!std::isfinite(step)) continue;
      stalls.points.emplace_back(step, field(c, {"stall_s"}));
      writes.points.emplace_back(step, field(c, {"write_s"}));
    }
  }
  out.push_back({"checkpoints", "Checkpoints: time written, and time training stood still",
                 "step the checkpoint holds", "seconds", non_empty({writes, stalls})});
  return out;
}

std::vector<Lane> trace_lanes(const json* trace) {
  std::vector<Lane> lanes;
  if (trace == nullptr || !trace->is_object() || !trace->contains("traceEvents") ||
      !(*trace)["traceEvents"].is_array()) {
    return lanes;
  }
  std::map<int64_t, size_t> by_tid;
  auto lane_of = [&](int64_t tid) -> Lane& {
    auto it = by_tid.find(tid);
    if (it == by_tid.end()) {
      it = by_tid.emplace(tid, lanes.size()).first;
      lanes.push_back({"resource " + std::to_string(tid), {}});
    }
    return lanes[it->second];
  };
  for (const json& e : (*trace)["traceEvents"]) {
    if (!e.is_object() || !e.contains("tid") || !e["tid"].is_number_integer()) continue;
    const int64_t tid = e["tid"].get<int64_t>();
    const std::string ph = e.value("ph", "");
    if (ph == "M" && e.value("name", "") == "thread_name" && e.contains("args") &&
        e["args"].is_object() && e["args"].contains("name") && e["args"]["name"].is_string()) {
      lane_of(tid).name = e["args"]["name"].get<std::string>();
    } else if (ph == "X") {
      const double ts = field(e, {"ts"}), dur = field(e, {"dur"});
      if (!std::isfinite(ts) || !std::isfinite(dur)) continue;
      const std::string name =
          e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
      lane_of(tid).spans.push_back({ts * 1e-6, (ts + dur) * 1e-6, name});
    }
  }
  return lanes;
}

// The stylesheet: colours as variables, swapped for a dark scheme.
constexpr const char* kStyle = R"css(
:root { --bg: #ffffff; --fg: #1d2430; --muted: #5b6575; --grid: #e3e7ee; --card: #f6f8fb;
  --s0: #2563eb; --s1: #d9480f; --s2: #2f9e44; --s3: #9c36b5; --s4: #c2255c; --s5: #0c8599;
  --s6: #e8590c; --s7: #5c7cfa; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #12161c; --fg: #e6e9ef; --muted: #9aa4b2; --grid: #2a313c; --card: #1a2029;
    --s0: #6ea8fe; --s1: #ff922b; --s2: #69db7c; --s3: #da77f2; --s4: #f783ac; --s5: #66d9e8;
    --s6: #ffa94d; --s7: #91a7ff; } }
body { background: var(--bg); color: var(--fg); font: 14px/1.4 system-ui, sans-serif;
  margin: 24px auto; max-width: 1400px; padding: 0 16px; }
h1 { font-size: 20px; } .summary { color: var(--muted); } .warning { color: var(--s1); }
.grid-of-charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr));
  gap: 16px; }
figure.chart { background: var(--card); border-radius: 8px; margin: 0; padding: 8px 12px; }
figcaption { font-weight: 600; margin-bottom: 4px; }
svg { width: 100%; height: auto; display: block; }
svg text { fill: var(--fg); font-size: 11px; } svg .tick, svg .empty { fill: var(--muted); }
svg .label { font-size: 12px; } svg .grid { stroke: var(--grid); stroke-width: 1; }
svg .axis { stroke: var(--muted); fill: none; }
svg .line { fill: none; stroke-width: 2; stroke-linejoin: round; stroke-linecap: round; }
)css";

std::string series_css() {
  std::string css;
  for (int i = 0; i < 8; ++i) {
    const std::string v = "var(--s" + std::to_string(i) + ")";
    css += "svg .series-" + std::to_string(i) + " { fill: " + v + "; stroke: " + v +
           "; } svg path.series-" + std::to_string(i) + " { fill: none; }\n";
  }
  return css;
}

std::string summary(const MetricsFile& m) {
  if (m.lines.empty()) return "No steps in this metrics file.";
  const json& last = m.lines.back();
  char buf[256];
  std::snprintf(buf, sizeof buf, "%zu steps recorded; last step %g: loss %.4f", m.lines.size(),
                field(last, {"step"}) + 1, field(last, {"loss"}));
  std::string s = buf;
  for (auto it = m.lines.rbegin(); it != m.lines.rend(); ++it) {
    if (std::isfinite(field(*it, {"val_loss"}))) {
      std::snprintf(buf, sizeof buf, "; last validation loss %.4f (step %g)",
                    field(*it, {"val_loss"}), field(*it, {"step"}) + 1);
      s += buf;
      break;
    }
  }
  return s + ".";
}

}  // namespace

Result<MetricsFile> read_metrics_file(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, read_whole_file(path, "metrics file"));
  MetricsFile m;
  size_t start = 0, number = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto parsed = parse_json(line, "metrics file " + path + " line " + std::to_string(number));
    if (!parsed.ok() || !parsed->is_object()) {
      m.warning = "line " + std::to_string(number) + " of " + path +
                  " is not a metrics record (a run stopped while writing it?); the report " +
                  "shows the " + std::to_string(m.lines.size()) + " lines before it";
      break;
    }
    m.lines.push_back(std::move(*parsed));
  }
  return m;
}

std::string render_report(const MetricsFile& metrics, const json* trace, const std::string& title) {
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"color-scheme\" content=\"light dark\"><title>" +
      escape_xml(title) + "</title><style>" + kStyle + series_css() + "</style></head><body><h1>" +
      escape_xml(title) + "</h1><p class=\"summary\">" + escape_xml(summary(metrics)) + "</p>";
  if (!metrics.warning.empty()) {
    html += "<p class=\"warning\">" + escape_xml(metrics.warning) + "</p>";
  }
  html += "<div class=\"grid-of-charts\">";
  for (const LineChart& c : charts(metrics)) html += svg_line_chart(c);
  html += svg_timeline("timeline", "One step's timeline (from the trace), one lane per resource",
                       trace_lanes(trace));
  return html + "</div></body></html>\n";
}

}  // namespace strata::report
