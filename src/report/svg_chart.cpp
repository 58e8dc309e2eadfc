// SVG charts for the run report: svg_chart.h.
#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace strata::report {

namespace {

constexpr double kWidth = 640, kHeight = 300;                       // the viewBox
constexpr double kLeft = 72, kRight = 16, kTop = 16, kBottom = 48;  // plot margins
constexpr double kLaneLeft = 104;  // the timeline's margin, for resource names
constexpr int kPalette = 8;        // series-0 .. series-7
constexpr int kLegendColumns = 4;  // legend entries per row, above the plot
constexpr double kLegendRow = 16;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A tick label: short, with k/M/G for large values and exponents for tiny ones.
std::string tick_label(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a == 0) return "0";
  if (a >= 1e9) {
    std::snprintf(buf, sizeof buf, "%gG", v / 1e9);
  } else if (a >= 1e6) {
    std::snprintf(buf, sizeof buf, "%gM", v / 1e6);
  } else if (a >= 1e4) {
    std::snprintf(buf, sizeof buf, "%gk", v / 1e3);
  } else if (a < 1e-2) {
    std::snprintf(buf, sizeof buf, "%.1e", v);
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
  // A range of positive width (a flat series gets a unit band around its value).
  void widen() {
    if (hi - lo > 0) return;
    const double pad = std::max(std::fabs(lo) * 0.1, 1e-12);
    lo -= pad;
    hi += pad;
  }
};

std::string open_svg(const std::string& id, const std::string& title) {
  return "<figure class=\"chart\" id=\"" + escape_xml(id) + "\"><figcaption>" + escape_xml(title) +
         "</figcaption><svg viewBox=\"0 0 " + num(kWidth) + " " + num(kHeight) +
         "\" role=\"img\" aria-label=\"" + escape_xml(title) + "\">";
}

}  // namespace

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int count) {
  std::vector<double> ticks;
  if (!(hi > lo) || count < 1) return ticks;
  const double raw = (hi - lo) / count;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    if (f * mag >= raw) {
      step = f * mag;
      break;
    }
  }
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  }
  return ticks;
}

std::string svg_line_chart(const LineChart& chart) {
  Range xr, yr;
  for (const Series& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      xr.add(x);
      yr.add(y);
    }
  }
  std::string out = open_svg(chart.id, chart.title);
  if (xr.empty() || yr.empty()) {
    out += "<text class=\"empty\" x=\"" + num(kWidth / 2) + "\" y=\"" + num(kHeight / 2) +
           "\" text-anchor=\"middle\">no data in this run's metrics</text></svg></figure>";
    return out;
  }
  yr.lo = std::min(yr.lo, chart.y_min_floor);
  xr.widen();
  yr.widen();
  // The legend's rows sit above the plot, which starts below them.
  const auto rows =
      static_cast<double>((chart.series.size() + kLegendColumns - 1) / kLegendColumns);
  const double top = kTop + rows * kLegendRow;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - top - kBottom;
  auto px = [&](double x) { return kLeft + (x - xr.lo) / (xr.hi - xr.lo) * pw; };
  auto py = [&](double y) { return top + (1 - (y - yr.lo) / (yr.hi - yr.lo)) * ph; };
  // Grid, ticks and axis labels.
  for (double t : nice_ticks(yr.lo, yr.hi, 5)) {
    out += "<line class=\"grid\" x1=\"" + num(kLeft) + "\" x2=\"" + num(kLeft + pw) + "\" y1=\"" +
           num(py(t)) + "\" y2=\"" + num(py(t)) + "\"/><text class=\"tick\" x=\"" + num(kLeft - 6) +
           "\" y=\"" + num(py(t) + 4) + "\" text-anchor=\"end\">" + tick_label(t) + "</text>";
  }
  for (double t : nice_ticks(xr.lo, xr.hi, 6)) {
    out += "<text class=\"tick\" x=\"" + num(px(t)) + "\" y=\"" + num(top + ph + 16) +
           "\" text-anchor=\"middle\">" + tick_label(t) + "</text>";
  }
  out += "<path class=\"axis\" d=\"M" + num(kLeft) + " " + num(top) + "V" + num(top + ph) + "H" +
         num(kLeft + pw) + "\"/>";
  out += "<text class=\"label\" x=\"" + num(kLeft + pw / 2) + "\" y=\"" + num(kHeight - 8) +
         "\" text-anchor=\"middle\">" + escape_xml(chart.x_label) + "</text>";
  out += "<text class=\"label\" transform=\"translate(14 " + num(top + ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escape_xml(chart.y_label) + "</text>";
  // Series, then the legend.
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    const std::string cls = "series-" + std::to_string(i % kPalette);
    if (s.markers) {
      for (const auto& [x, y] : s.points) {
        if (!std::isfinite(y)) continue;
        out += "<circle class=\"" + cls + "\" cx=\"" + num(px(x)) + "\" cy=\"" + num(py(y)) +
               "\" r=\"3.5\"><title>" + escape_xml(s.name) + " " + tick_label(x) + ": " +
               tick_label(y) + "</title></circle>";
      }
    } else {
      std::string d;
      for (const auto& [x, y] : s.points) {
        if (!std::isfinite(y)) continue;
        d += (d.empty() ? "M" : "L") + num(px(x)) + " " + num(py(y));
      }
      if (s.points.size() == 1) d += "h0.01";  // a single point still draws (round caps)
      if (!d.empty()) out += "<path class=\"line " + cls + "\" d=\"" + d + "\"/>";
    }
    const double lx = kLeft + static_cast<double>(i % kLegendColumns) * 138;
    const double ly = kTop + static_cast<double>(i / kLegendColumns) * kLegendRow;
    out += "<rect class=\"" + cls + "\" x=\"" + num(lx) + "\" y=\"" + num(ly - 8) +
           "\" width=\"10\" height=\"10\"/><text class=\"legend\" x=\"" + num(lx + 14) + "\" y=\"" +
           num(ly + 1) + "\">" + escape_xml(s.name) + "</text>";
  }
  return out + "</svg></figure>";
}

std::string svg_timeline(const std::string& id, const std::string& title,
                         const std::vector<Lane>& lanes) {
  Range tr;
  for (const Lane& l : lanes) {
    for (const Span& s : l.spans) {
      tr.add(s.start);
      tr.add(s.end);
    }
  }
  std::string out = open_svg(id, title);
  if (tr.empty()) {
    out += "<text class=\"empty\" x=\"" + num(kWidth / 2) + "\" y=\"" + num(kHeight / 2) +
           "\" text-anchor=\"middle\">no trace (strata train --trace FILE)</text></svg></figure>";
    return out;
  }
  tr.widen();
  const double pw = kWidth - kLaneLeft - kRight, ph = kHeight - kTop - kBottom;
  const double lane_h = ph / static_cast<double>(std::max<size_t>(lanes.size(), 1));
  auto px = [&](double t) { return kLaneLeft + (t - tr.lo) / (tr.hi - tr.lo) * pw; };
  for (double t : nice_ticks(tr.lo, tr.hi, 6)) {
    out += "<line class=\"grid\" x1=\"" + num(px(t)) + "\" x2=\"" + num(px(t)) + "\" y1=\"" +
           num(kTop) + "\" y2=\"" + num(kTop + ph) + "\"/><text class=\"tick\" x=\"" + num(px(t)) +
           "\" y=\"" + num(kTop + ph + 16) + "\" text-anchor=\"middle\">" + tick_label(t) +
           "</text>";
  }
  for (size_t i = 0; i < lanes.size(); ++i) {
    const double y = kTop + static_cast<double>(i) * lane_h;
    const std::string cls = "series-" + std::to_string(i % kPalette);
    out += "<text class=\"tick\" x=\"" + num(kLaneLeft - 6) + "\" y=\"" + num(y + lane_h / 2 + 4) +
           "\" text-anchor=\"end\">" + escape_xml(lanes[i].name) + "</text>";
    for (const Span& s : lanes[i].spans) {
      const double w = std::max(px(s.end) - px(s.start), 0.5);
      out += "<rect class=\"" + cls + "\" x=\"" + num(px(s.start)) + "\" y=\"" + num(y + 2) +
             "\" width=\"" + num(w) + "\" height=\"" + num(std::max(lane_h - 4, 1.0)) +
             "\"><title>" + escape_xml(s.label) + "</title></rect>";
    }
  }
  out += "<path class=\"axis\" d=\"M" + num(kLaneLeft) + " " + num(kTop) + "V" + num(kTop + ph) +
         "H" + num(kLaneLeft + pw) + "\"/><text class=\"label\" x=\"" + num(kLaneLeft + pw / 2) +
         "\" y=\"" + num(kHeight - 8) + "\" text-anchor=\"middle\">time in the step (s)</text>";
  return out + "</svg></figure>";
}

}  // namespace strata::report
