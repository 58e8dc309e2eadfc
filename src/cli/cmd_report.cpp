// `strata report METRICS.jsonl [--trace TRACE.json] --out report.html`: the run report
// (report/run_report.h), one self-contained HTML page.
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "core/log.h"
#include "core/output_file.h"
#include "report/run_report.h"

namespace strata::cli {

Status write_run_report(const std::string& metrics_path, const std::string& trace_path,
                        const std::string& out, const std::string& title) {
  STRATA_ASSIGN_OR_RETURN(report::MetricsFile metrics, report::read_metrics_file(metrics_path));
  nlohmann::json trace;
  const bool has_trace = !trace_path.empty();
  if (has_trace) {
    STRATA_ASSIGN_OR_RETURN(std::string text, read_whole_file(trace_path, "trace file"));
    STRATA_ASSIGN_OR_RETURN(trace, parse_json(text, "trace file " + trace_path));
  }
  if (!metrics.warning.empty()) log_warn(metrics.warning);
  return write_output_file(out, report::render_report(metrics, has_trace ? &trace : nullptr, title),
                           "report");
}

namespace {

const std::vector<FlagSpec> kReportFlags = {
    {"metrics", true, false}, {"trace", true, false}, {"out", true, false}};

// `metrics`: the bare first argument, if any.
int report_main(const ParsedArgs& a, std::string metrics) {
  if (a.has("metrics")) {
    if (!metrics.empty()) return fail("strata report: the metrics file is given twice", 2);
    metrics = a.get("metrics");
  }
  if (metrics.empty() || !a.has("out")) {
    return fail("strata report: METRICS.jsonl and --out FILE.html are both required", 2);
  }
  const std::string out = a.get("out");
  // Note [Writing an output file]: refused before the metrics are read.
  if (Status usable = check_output_path(out, "report"); !usable.ok()) {
    return fail(usable.message(), exit_status_for(usable, Stage::before_work));
  }
  Status st = write_run_report(metrics, a.get("trace"), out, "Strata run: " + metrics);
  if (!st.ok()) return fail(st.message(), exit_status_for(st, Stage::running));
  log_info("report written to " + out);
  return 0;
}

}  // namespace

int cmd_report(const std::vector<std::string>& args) {
  // The metrics file may come first, bare: strata report run.jsonl --out report.html
  std::vector<std::string> flags = args;
  std::string metrics;
  if (!flags.empty() && flags.front().rfind("-", 0) != 0) {  // not a flag, nor -h
    metrics = flags.front();
    flags.erase(flags.begin());
  }
  return run_command(flags, kReportFlags, "report",
                     [&metrics](const ParsedArgs& a) { return report_main(a, metrics); });
}

}  // namespace strata::cli
