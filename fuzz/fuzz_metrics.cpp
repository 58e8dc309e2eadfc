// Metrics files for the run report (report/run_report.h): the input on disk, read as a stream and
// rendered. Read twice, with the default bounds and with tiny ones (a few buckets, so series are
// downsampled; short lines, so the line limit is hit): both agree on the records before any limit,
// every series keeps within its bound, and the page is one closed HTML document.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_scratch.h"
#include "report/run_report.h"

namespace {

[[noreturn]] void fail(const char* why) {
  std::fprintf(stderr, "metrics: %s\n", why);
  std::abort();
}

void check(const strata::report::MetricsFile& m, size_t max_buckets) {
  for (const strata::report::LineChart& c : m.charts) {
    for (const strata::report::Series& s : c.series) {
      if (s.points.empty()) fail("an empty series is drawn");
      if (s.points.size() > 2 * max_buckets + 2) fail("a series keeps more points than its bound");
    }
  }
  const std::string html = strata::report::render_report(m, nullptr, "fuzz");
  const std::string end = "</body></html>\n";
  if (html.rfind("<!DOCTYPE html>", 0) != 0 || html.size() < end.size() ||
      html.compare(html.size() - end.size(), end.size(), end) != 0) {
    fail("the page is not one HTML document");
  }
  if (html.find("<script") != std::string::npos) fail("the page holds a script");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = strata::fuzz::write_scratch("fuzz_metrics.jsonl", data, size);
  auto whole = strata::report::read_metrics_file(path);
  if (!whole.ok()) fail("a readable metrics file is refused");
  check(*whole, strata::report::Downsampler::kDefaultBuckets);
  constexpr size_t kShortLine = 64, kFewBuckets = 3;
  auto tiny = strata::report::read_metrics_file(path, kShortLine, kFewBuckets);
  if (!tiny.ok()) fail("a readable metrics file is refused with tiny bounds");
  check(*tiny, kFewBuckets);
  if (tiny->records > whole->records) fail("a shorter line limit read more records");
  if (tiny->warning.empty() && (tiny->records != whole->records || whole->warning != "")) {
    fail("the two reads disagree on a file within both limits");
  }
  return 0;
}
