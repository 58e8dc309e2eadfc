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

namespace strata::report {

// The metrics lines of a file: one JSON object per line; blank lines skipped; a line that is not
// an object (a run killed mid-write) ends the data, noted in the report rather than refused.
struct MetricsFile {
  std::vector<nlohmann::json> lines;
  std::string warning;  // "" or why reading stopped early
};
Result<MetricsFile> read_metrics_file(const std::string& path);

// The page. `trace` may be null (or not a Chrome trace: the timeline then says there is none).
std::string render_report(const MetricsFile& metrics, const nlohmann::json* trace,
                          const std::string& title);

}  // namespace strata::report
