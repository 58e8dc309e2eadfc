// The run report: one self-contained HTML page (inline SVG and CSS, no script, nothing fetched)
// from a run's metrics lines (docs/design.md §10) and optionally its step trace. `strata report`
// and `strata train --report FILE` write it.
//
// Charts, each from the fields it needs and "no data" where a run has none (an in-memory run
// has no storage traffic; a failed run's file may end early; older files lack newer fields):
// loss and validation loss; learning rate; gradient norm with the skipped steps marked; tokens/s
// and model FLOP/s; bytes per step by direction (storage read and write, h2d, d2h); busy time per
// resource against the roofline and the step time; peak memory per tier against the plan's fit
// and the device budget (memory.device_bytes, when set); checkpoint stalls; and the trace's step as
// a timeline, one lane per resource. Light and dark schemes follow the reader's setting
// (prefers-color-scheme).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "report/downsample.h"
#include "report/svg_chart.h"

namespace strata::report {

// What the report shows of a metrics file, read as a stream: one JSON object per line; blank
// lines skipped; a line that is not an object (a run killed mid-write), or one longer than
// `max_line_bytes` (read no further than that), ends the data, noted in the report rather than
// refused. The charts' series are downsampled (Note [Downsampling a series]); the summary's figures
// are exact. Memory is bounded by the line limit and the charts, not the file's length.
struct MetricsFile {
  uint64_t records = 0;                 // metrics lines read
  double last_step = 0, last_loss = 0;  // of the last record (NaN when it has none)
  double val_step = 0, val_loss = 0;    // of the last record with a validation loss
  bool has_val = false;
  std::vector<LineChart> charts;
  std::string warning;  // "" or why reading stopped early
};
inline constexpr size_t kMaxMetricsLineBytes = 1 << 20;  // a real line is under 2 KB
Result<MetricsFile> read_metrics_file(const std::string& path,
                                      size_t max_line_bytes = kMaxMetricsLineBytes,
                                      size_t max_buckets = Downsampler::kDefaultBuckets);

// The page. `trace` may be null (or not a Chrome trace: the timeline then says there is none).
std::string render_report(const MetricsFile& metrics, const nlohmann::json* trace,
                          const std::string& title);

}  // namespace strata::report
