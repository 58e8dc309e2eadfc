// The run report: run_report.h.
#include "report/run_report.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "core/json_util.h"
#include "report/metrics_charts.h"

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
  if (m.records == 0) return "No steps in this metrics file.";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%llu steps recorded; last step %g: loss %.4f",
                static_cast<unsigned long long>(m.records), m.last_step, m.last_loss);
  std::string s = buf;
  if (m.has_val) {
    std::snprintf(buf, sizeof buf, "; last validation loss %.4f (step %g)", m.val_loss,
                  m.val_step);
    s += buf;
  }
  return s + ".";
}

// The metrics file's lines, each passed to `line` (which returns false to stop) with its number;
// a line longer than `max_bytes` stops the reading, and the result says where.
struct LineLimit {
  bool hit = false;
  size_t number = 0;
};
Result<LineLimit> for_each_line(const std::string& path, size_t max_bytes,
                                const std::function<bool(const std::string&, size_t)>& line) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return not_found("metrics file " + path + " does not exist");
    return io_error("cannot open metrics file " + path + ": " + std::strerror(err));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }  // read-only: nothing to lose if close reports an error
  } closer{fd};
  std::string text;
  size_t number = 0;
  std::vector<char> buf(1 << 16);
  while (true) {
    const ssize_t got = ::read(fd, buf.data(), buf.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      return io_error("cannot read metrics file " + path + ": " + std::strerror(err));
    }
    if (got == 0) break;
    for (const char* at = buf.data(); at < buf.data() + got;) {
      const char* end = static_cast<const char*>(std::memchr(at, '\n', buf.data() + got - at));
      const char* stop = end != nullptr ? end : buf.data() + got;
      if (text.size() + static_cast<size_t>(stop - at) > max_bytes) {
        return LineLimit{true, number + 1};  // read no further: the line may be any length
      }
      text.append(at, stop);
      if (end == nullptr) break;
      if (!line(text, ++number)) return LineLimit{};
      text.clear();
      at = end + 1;
    }
  }
  if (!text.empty()) line(text, ++number);  // the last line, without its newline
  return LineLimit{};
}

}  // namespace

Result<MetricsFile> read_metrics_file(const std::string& path, size_t max_line_bytes,
                                      size_t max_buckets) {
  MetricsFile m;
  ChartBuilder charts(max_buckets);
  auto stop_at = [&](size_t number, const std::string& why) {
    m.warning = "line " + std::to_string(number) + " of " + path + why + "; the report shows the " +
                std::to_string(m.records) + " lines before it";
  };
  auto one_line = [&](const std::string& line, size_t number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) return true;
    auto parsed = parse_json(line, "metrics file " + path + " line " + std::to_string(number));
    if (!parsed.ok() || !parsed->is_object()) {
      stop_at(number, " is not a metrics record (a run stopped while writing it?)");
      return false;
    }
    ++m.records;
    m.last_step = field(*parsed, {"step"});
    m.last_loss = field(*parsed, {"loss"});
    if (const double val = field(*parsed, {"val_loss"}); std::isfinite(val)) {
      m.has_val = true;
      m.val_loss = val;
      m.val_step = m.last_step;
    }
    charts.add(*parsed);
    return true;
  };
  STRATA_ASSIGN_OR_RETURN(LineLimit limit, for_each_line(path, max_line_bytes, one_line));
  if (limit.hit) {
    stop_at(limit.number, " is longer than " + std::to_string(max_line_bytes) +
                              " bytes, so not a metrics record");
  }
  m.charts = charts.charts();
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
  for (const LineChart& c : metrics.charts) html += svg_line_chart(c);
  html += svg_timeline("timeline", "One step's timeline (from the trace), one lane per resource",
                       trace_lanes(trace));
  return html + "</div></body></html>\n";
}

}  // namespace strata::report
