// The run report's charts gathered from metrics lines as they stream past (report/run_report.h):
// each series keeps only its own field, downsampled (Note [Downsampling a series]), so the memory
// and the page are bounded whatever the run's length.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/downsample.h"
#include "report/svg_chart.h"

namespace strata::report {

class ChartBuilder {
 public:
  explicit ChartBuilder(size_t max_buckets = Downsampler::kDefaultBuckets);
  // One metrics record (an object).
  void add(const nlohmann::json& line);
  // Every chart, in the page's order; a chart's empty series left out.
  std::vector<LineChart> charts() const;

  // busy_s resources beyond this many (first seen first) are not drawn: a real run has a handful,
  // and each one drawn costs a series on the page.
  static constexpr size_t kMaxResources = 32;

 private:
  struct Tracked {
    std::string name;  // in the legend
    std::string key;   // the record's field
    double scale = 1;
    bool markers = false;
    Downsampler points;
  };
  Series series(const Tracked& t) const;
  std::vector<Series> series(std::initializer_list<const char*> keys) const;
  void add_busy(const nlohmann::json& busy, bool has_step, double x);

  size_t max_buckets_;
  std::vector<Tracked> fields_;  // the step series, one field each
  std::vector<Tracked> busy_;    // one per busy_s resource, first seen first
  Tracked skipped_, writes_, stalls_;
};

}  // namespace strata::report
