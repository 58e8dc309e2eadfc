// Downsampling a series: downsample.h.
#include "report/downsample.h"

#include <algorithm>
#include <cmath>

namespace strata::report {

namespace {

// Whether `b` replaces `a` as the bucket's minimum (or maximum): strictly smaller (larger), or `a`
// is NaN and `b` is not. `b` arrives after `a`, so ties keep the first.
bool lower(double a, double b) {
  return b < a || (std::isnan(a) && !std::isnan(b));
}
bool higher(double a, double b) {
  return b > a || (std::isnan(a) && !std::isnan(b));
}

}  // namespace

Downsampler::Downsampler(size_t max_buckets) : max_buckets_(std::max<size_t>(max_buckets, 1)) {}

void Downsampler::merge_into(Bucket& into, const Bucket& from) {
  if (lower(into.min.y, from.min.y)) into.min = from.min;
  if (higher(into.max.y, from.max.y)) into.max = from.max;
}

void Downsampler::add(double x, double y) {
  const Point p{count_, x, y};
  if (count_ == 0) first_ = p;
  last_ = p;
  ++count_;
  if (p.index / width_ == buckets_.size()) {
    buckets_.push_back({p, p});
  } else {
    Bucket& b = buckets_.back();
    merge_into(b, {p, p});
  }
  if (buckets_.size() <= max_buckets_) return;
  // Note [Downsampling a series]: pairs merge; bucket 2i and 2i + 1 become bucket i.
  std::vector<Bucket> merged;
  merged.reserve(max_buckets_ / 2 + 1);
  for (size_t i = 0; i < buckets_.size(); i += 2) {
    merged.push_back(buckets_[i]);
    if (i + 1 < buckets_.size()) merge_into(merged.back(), buckets_[i + 1]);
  }
  buckets_ = std::move(merged);
  width_ *= 2;
}

std::vector<std::pair<double, double>> Downsampler::points() const {
  std::vector<std::pair<double, double>> out;
  if (count_ == 0) return out;
  out.reserve(2 * buckets_.size() + 2);
  uint64_t next = 0;  // the first index not yet emitted: each point at most once, in order
  auto emit = [&](const Point& p) {
    if (p.index < next) return;
    out.emplace_back(p.x, p.y);
    next = p.index + 1;
  };
  emit(first_);
  for (const Bucket& b : buckets_) {
    const bool min_first = b.min.index <= b.max.index;
    emit(min_first ? b.min : b.max);
    emit(min_first ? b.max : b.min);
  }
  emit(last_);
  return out;
}

}  // namespace strata::report
