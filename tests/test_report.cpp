// The run report's pieces (report/svg_chart.h, report/run_report.h); tests/report_browser.sh
// draws whole reports in Chromium.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "report/run_report.h"
#include "report/svg_chart.h"
#include "test_util.h"

namespace strata::report {
namespace {

TEST(Report, TicksAreOneTwoOrFiveTimesAPowerOfTen) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(nice_ticks(0.3, 1.2, 4), (std::vector<double>{0.5, 1.0}));  // 0.225 rounds up to 0.5
  EXPECT_EQ(nice_ticks(-3, 3, 6), (std::vector<double>{-3, -2, -1, 0, 1, 2, 3}));
  EXPECT_TRUE(nice_ticks(1, 1, 5).empty());
}

TEST(Report, ChartsEscapeTextAndSayWhenThereIsNoData) {
  const std::string empty = svg_line_chart({"c", "A <b> & \"c\"", "step", "s", {}});
  EXPECT_NE(empty.find("A &lt;b&gt; &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_NE(empty.find("no data"), std::string::npos);
  const std::string one =
      svg_line_chart({"c", "one point", "step", "s", {{"loss", {{1, 2.5}}, false}}});
  EXPECT_EQ(one.find("no data"), std::string::npos);
  EXPECT_NE(one.find("<path class=\"line series-0\" d=\"M"), std::string::npos);
}

TEST(Report, AMetricsFileCutOffMidLineKeepsTheLinesBefore) {
  const std::string dir = test::make_temp_dir("report_metrics");
  std::ofstream(dir + "/m.jsonl")
      << "{\"step\": 0, \"loss\": 5.5}\n\n{\"step\": 1, \"loss\": 5.0}\n"
      << "{\"step\": 2, \"lo";
  auto m = read_metrics_file(dir + "/m.jsonl");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->lines.size(), 2u);
  EXPECT_NE(m->warning.find("line 4"), std::string::npos) << m->warning;
  const std::string html = render_report(*m, nullptr, "run <x>");
  EXPECT_NE(html.find("<title>run &lt;x&gt;</title>"), std::string::npos);
  EXPECT_NE(html.find("line 4"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // nothing runs, nothing is fetched
  EXPECT_EQ(html.find("http"), std::string::npos);
  test::expect_error(read_metrics_file(dir + "/missing.jsonl").status(), ErrorCode::not_found,
                     {"missing.jsonl"});
}

}  // namespace
}  // namespace strata::report
