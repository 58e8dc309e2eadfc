// The run report's pieces (report/svg_chart.h, report/run_report.h); tests/report_browser.sh
// draws whole reports in Chromium.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "report/downsample.h"
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
  EXPECT_EQ(m->records, 2u);
  EXPECT_NE(m->warning.find("line 4"), std::string::npos) << m->warning;
  const std::string html = render_report(*m, nullptr, "run <x>");
  EXPECT_NE(html.find("<title>run &lt;x&gt;</title>"), std::string::npos);
  EXPECT_NE(html.find("line 4"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // nothing runs, nothing is fetched
  EXPECT_EQ(html.find("http"), std::string::npos);
  test::expect_error(read_metrics_file(dir + "/missing.jsonl").status(), ErrorCode::not_found,
                     {"missing.jsonl"});
}

// Note [Downsampling a series] computed directly: every point held, the final width the smallest
// power of two that gives at most max_buckets buckets, each bucket's first minimum and first
// maximum (a NaN only when nothing else is there), the first and last point, in order.
std::vector<std::pair<double, double>> naive_downsample(
    const std::vector<std::pair<double, double>>& p, size_t max_buckets) {
  std::vector<std::pair<double, double>> out;
  if (p.empty()) return out;
  size_t width = 1;
  while ((p.size() + width - 1) / width > max_buckets) width *= 2;
  std::vector<size_t> keep = {0, p.size() - 1};
  auto better = [](double best, double y, bool low) {
    if (std::isnan(best)) return !std::isnan(y);
    return low ? y < best : y > best;
  };
  for (size_t start = 0; start < p.size(); start += width) {
    size_t lo = start, hi = start;
    for (size_t i = start; i < std::min(start + width, p.size()); ++i) {
      if (better(p[lo].second, p[i].second, true)) lo = i;
      if (better(p[hi].second, p[i].second, false)) hi = i;
    }
    keep.push_back(lo);
    keep.push_back(hi);
  }
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  for (size_t i : keep) out.push_back(p[i]);
  return out;
}

TEST(Report, DownsamplingMatchesANaiveReference) {
  std::mt19937 rng(42);
  for (size_t max_buckets : {1, 2, 3, 7, 50, 999}) {
    for (size_t n : {0, 1, 2, 5, 49, 50, 51, 100, 999, 1000, 4097, 20000}) {
      std::vector<std::pair<double, double>> all;
      Downsampler d(max_buckets);
      for (size_t i = 0; i < n; ++i) {
        // Small integers, so ties are common; now and then a NaN.
        const double y = rng() % 50 == 0 ? NAN : static_cast<double>(rng() % 20);
        all.emplace_back(static_cast<double>(i) * 0.5 + 3, y);
        d.add(all.back().first, y);
      }
      const auto got = d.points(), want = naive_downsample(all, max_buckets);
      ASSERT_EQ(got.size(), want.size()) << "n " << n << " max_buckets " << max_buckets;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].first, want[i].first) << "n " << n << " point " << i;
        EXPECT_TRUE(got[i].second == want[i].second ||
                    (std::isnan(got[i].second) && std::isnan(want[i].second)));
      }
      EXPECT_LE(got.size(), 2 * max_buckets + 2);
      if (n <= max_buckets) EXPECT_EQ(got.size(), n);  // short series come out whole
    }
  }
}

TEST(Report, ALongRunGivesABoundedPageWithItsSpikeAndAnExactSummary) {
  const std::string dir = test::make_temp_dir("report_long");
  constexpr int kSteps = 60000, kSpike = 41729, kSkipped = 17777;  // buckets of 64 points
  {
    std::ofstream out(dir + "/m.jsonl");
    char line[200];
    for (int i = 0; i < kSteps; ++i) {
      const double loss = i == kSpike ? 50.0 : 6.0 - i * 1e-5;
      std::snprintf(line, sizeof line, R"({"step":%d,"loss":%.6f,"skipped":%s,"busy_s":{"x":0.1})",
                    i + 1, loss, i == kSkipped ? "true" : "false");  // steps count from 1
      out << line;
      if (i % 1000 == 999) out << ",\"val_loss\":" << 7.0 - i * 1e-5;
      out << "}\n";
    }
  }
  auto m = read_metrics_file(dir + "/m.jsonl");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->records, static_cast<uint64_t>(kSteps));
  EXPECT_EQ(m->warning, "");
  size_t series = 0;
  for (const LineChart& c : m->charts) {
    for (const Series& s : c.series) {
      ++series;
      EXPECT_LE(s.points.size(), 2 * Downsampler::kDefaultBuckets + 2) << s.name;
      if (s.name == "training loss") {
        auto top = std::max_element(s.points.begin(), s.points.end(),
                                    [](auto& a, auto& b) { return a.second < b.second; });
        EXPECT_EQ(*top, std::make_pair(kSpike + 1.0, 50.0));  // the spike is the y maximum
        EXPECT_EQ(s.points.back(), std::make_pair(kSteps + 0.0, 6.0 - (kSteps - 1) * 1e-5));
      }
      if (s.name == "skipped step") EXPECT_EQ(s.points, (decltype(s.points){{kSkipped + 1.0, 0}}));
    }
  }
  EXPECT_EQ(series, 4u);  // training and validation loss, the skipped step, x busy
  const std::string html = render_report(*m, nullptr, "long");
  EXPECT_LT(html.size(), 1u << 20);
  EXPECT_NE(html.find("60000 steps recorded; last step 60000: loss 5.4000; last validation loss "
                      "6.4000 (step 60000)."),
            std::string::npos);
}

TEST(Report, AnOverlongLineEndsTheDataUnreadWhole) {
  const std::string dir = test::make_temp_dir("report_overlong");
  const std::string path = dir + "/m.jsonl";
  std::ofstream(path) << "{\"step\": 0, \"loss\": 5.5}\n{\"step\": 1, \"loss\": 5.0}\n"
                      << "{\"step\": 2, \"loss\": 4.0, \"pad\": \"" << std::string(100, 'x')
                      << "\"}\n{\"step\": 3, \"loss\": 3.0}\n";
  auto small = read_metrics_file(path, 64);
  ASSERT_TRUE(small.ok()) << small.status().to_string();
  EXPECT_EQ(small->records, 2u);
  EXPECT_NE(small->warning.find("line 3 of " + path + " is longer than 64 bytes"),
            std::string::npos)
      << small->warning;
  EXPECT_EQ(read_metrics_file(path)->records, 4u);  // within the default limit: all of it
  // A 1 GiB line (a sparse file: one record, then zeros without a newline) is refused after the
  // limit's worth, not read whole.
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  std::ofstream(path) << "{\"step\": 0, \"loss\": 5.5}\n";
  ASSERT_EQ(::truncate(path.c_str(), int64_t{1} << 30), 0);
  auto huge = read_metrics_file(path);
  ASSERT_TRUE(huge.ok()) << huge.status().to_string();
  EXPECT_EQ(huge->records, 1u);
  EXPECT_NE(huge->warning.find("line 2 of " + path + " is longer than 1048576 bytes"),
            std::string::npos)
      << huge->warning;
  EXPECT_NE(render_report(*huge, nullptr, "t").find("is longer than"), std::string::npos);
}

}  // namespace
}  // namespace strata::report
