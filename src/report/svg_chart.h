// Charts as inline SVG text, for the run report (report/run_report.h): line charts over steps and
// a timeline of one step. No scripts and no external resources: the page draws offline, and its
// colours follow the page's light or dark scheme through CSS classes (series-0 .. series-7,
// axis, grid, lane) that the report's stylesheet defines.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace strata::report {

struct Series {
  std::string name;                               // in the legend
  std::vector<std::pair<double, double>> points;  // (x, y), x increasing
  bool markers = false;                           // dots instead of a line (sparse values)
};

struct LineChart {
  std::string id;       // the element id, for tests and links
  std::string title;    // above the chart
  std::string x_label;  // with its unit, e.g. "step"
  std::string y_label;  // with its unit, e.g. "loss (nats)", "GB/s"
  std::vector<Series> series;
  double y_min_floor = 0;  // the y axis starts at min(this, the data's minimum)
};

// One chart; a chart whose series hold no points says so in place of the plot.
std::string svg_line_chart(const LineChart& chart);

struct Span {
  double start = 0, end = 0;  // seconds
  std::string label;          // shown on hover
};
struct Lane {
  std::string name;  // a resource
  std::vector<Span> spans;
};
// Lanes of spans on a shared time axis (seconds).
std::string svg_timeline(const std::string& id, const std::string& title,
                         const std::vector<Lane>& lanes);

// Text escaped for HTML and SVG.
std::string escape_xml(const std::string& text);

// Tick positions covering [lo, hi]: 1, 2 or 5 times a power of ten apart, about `count` of them.
std::vector<double> nice_ticks(double lo, double hi, int count);

}  // namespace strata::report
