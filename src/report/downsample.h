// A series downsampled as it streams in, for the run report's charts (report/run_report.h): a
// bounded number of points whatever the run's length, a spike still drawn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace strata::report {

// Note [Downsampling a series]: points arrive in order; point i falls in bucket i / width. Each
// bucket keeps its minimum and its maximum (the first of equal ones; a NaN only when the bucket
// holds nothing else); the output is the first point, each bucket's min and max in arrival order,
// and the last point: at most 2 * max_buckets + 2 points. The width starts at 1, so a series of
// at most max_buckets points comes out whole and unchanged; when the bucket count passes
// max_buckets, neighbouring pairs merge and the width doubles. One pass, because the reader streams
// a file of unknown length (a run still writing it, or a pipe) and reading it twice would double
// the time of the longest files; buckets count points, not steps, because steps need not start at
// 0 or be evenly spaced (validation every N steps, a resumed run) and every bucket is then equally
// full. A min/max pair per bucket keeps a loss spike or a lone marker on the page.
class Downsampler {
 public:
  explicit Downsampler(size_t max_buckets = kDefaultBuckets);
  static constexpr size_t kDefaultBuckets = 999;  // 2 * 999 + 2 = 2000 points, ~3 per pixel column

  void add(double x, double y);
  // The kept points in arrival order.
  std::vector<std::pair<double, double>> points() const;
  uint64_t count() const { return count_; }
  uint64_t width() const { return width_; }

 private:
  struct Point {
    uint64_t index = 0;
    double x = 0, y = 0;
  };
  struct Bucket {
    Point min, max;
  };
  static void merge_into(Bucket& into, const Bucket& from);

  size_t max_buckets_;
  uint64_t width_ = 1, count_ = 0;
  std::vector<Bucket> buckets_;
  Point first_, last_;
};

}  // namespace strata::report
