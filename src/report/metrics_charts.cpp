// The run report's charts from streamed metrics lines: metrics_charts.h.
#include "report/metrics_charts.h"

#include <algorithm>
#include <cmath>

namespace strata::report {

namespace {

using json = nlohmann::json;

struct FieldSpec {
  const char* name;
  const char* key;
  double scale;
  bool markers;
};

constexpr double kGB = 1e-9, kGiB = 1.0 / (1 << 30);

// Every series over steps that is one field of a record, as the charts below name them.
constexpr FieldSpec kFields[] = {
    {"training loss", "loss", 1, false},
    {"validation loss", "val_loss", 1, true},
    {"learning rate", "lr", 1, false},
    {"gradient norm", "grad_norm", 1, false},
    {"tokens/s", "tokens_per_s", 1, false},
    {"model FLOP/s", "model_flops_per_s", 1e-12, false},
    {"storage read", "storage_read_bytes", kGB, false},
    {"storage write", "storage_write_bytes", kGB, false},
    {"host to device", "h2d_bytes", kGB, false},
    {"device to host", "d2h_bytes", kGB, false},
    {"step time", "iter_s", 1, false},
    {"roofline", "roofline_s", 1, false},
    {"device peak", "peak_device_bytes", kGiB, false},
    {"host peak", "peak_host_bytes", kGiB, false},
    {"device planned", "planned_device_bytes", kGiB, false},
    {"host planned", "planned_host_bytes", kGiB, false},
    {"device budget", "device_budget_bytes", kGiB, false},
};

// The number at `key` of an object, or NaN when absent or not a number.
double field(const json& object, const char* key) {
  if (!object.is_object()) return NAN;
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : NAN;
}

std::vector<Series> non_empty(std::vector<Series> all) {
  std::vector<Series> out;
  for (Series& s : all) {
    if (!s.points.empty()) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

ChartBuilder::ChartBuilder(size_t max_buckets)
    : max_buckets_(max_buckets),
      skipped_{"skipped step", "", 1, true, Downsampler(max_buckets)},
      writes_{"write", "", 1, true, Downsampler(max_buckets)},
      stalls_{"stall", "", 1, true, Downsampler(max_buckets)} {
  for (const FieldSpec& f : kFields) {
    fields_.push_back({f.name, f.key, f.scale, f.markers, Downsampler(max_buckets)});
  }
}

void ChartBuilder::add_busy(const json& busy, bool has_step, double x) {
  for (const auto& item : busy.items()) {
    const std::string& name = item.key();  // not a structured binding: clang 14 cannot capture one
    auto it =
        std::find_if(busy_.begin(), busy_.end(), [&](const Tracked& t) { return t.key == name; });
    if (it == busy_.end()) {
      if (busy_.size() >= kMaxResources) continue;
      busy_.push_back({name + " busy", name, 1, false, Downsampler(max_buckets_)});
      it = busy_.end() - 1;
    }
    const double v = item.value().is_number() ? item.value().get<double>() : NAN;
    if (has_step && std::isfinite(v)) it->points.add(x, v);
  }
}

void ChartBuilder::add(const json& line) {
  const double step = field(line, "step");
  const bool has_step = std::isfinite(step);
  const double x = step;  // steps count from 1, as the checkpoints do
  for (Tracked& t : fields_) {
    const double v = field(line, t.key.c_str());
    if (has_step && std::isfinite(v)) t.points.add(x, v * t.scale);
  }
  auto skipped = line.find("skipped");
  if (has_step && skipped != line.end() && skipped->is_boolean() && skipped->get<bool>()) {
    skipped_.points.add(x, 0);
  }
  // Resources are named (first seen first) even in a record whose step is not a number.
  auto busy = line.find("busy_s");
  if (busy != line.end() && busy->is_object()) add_busy(*busy, has_step, x);
  auto checkpoints = line.find("checkpoints");
  if (checkpoints == line.end() || !checkpoints->is_array()) return;
  for (const json& c : *checkpoints) {
    const double step = field(c, "step");
    if (!std::isfinite(step)) continue;
    stalls_.points.add(step, field(c, "stall_s"));
    writes_.points.add(step, field(c, "write_s"));
  }
}

Series ChartBuilder::series(const Tracked& t) const {
  return {t.name, t.points.points(), t.markers};
}

std::vector<Series> ChartBuilder::series(std::initializer_list<const char*> keys) const {
  std::vector<Series> out;
  for (const char* key : keys) {
    for (const Tracked& t : fields_) {
      if (t.key == key) out.push_back(series(t));
    }
  }
  return out;
}

std::vector<LineChart> ChartBuilder::charts() const {
  std::vector<LineChart> out;
  out.push_back(
      {"loss", "Loss", "step", "loss (nats per token)", non_empty(series({"loss", "val_loss"}))});
  out.push_back({"lr", "Learning rate", "step", "learning rate", non_empty(series({"lr"}))});
  std::vector<Series> grad = series({"grad_norm"});
  grad.push_back(series(skipped_));
  out.push_back({"grad_norm", "Gradient norm (before clipping)", "step", "global L2 norm",
                 non_empty(std::move(grad))});
  out.push_back(
      {"tokens_per_s", "Throughput", "step", "tokens / s", non_empty(series({"tokens_per_s"}))});
  out.push_back(
      {"flops", "Model FLOP/s", "step", "TFLOP / s", non_empty(series({"model_flops_per_s"}))});
  out.push_back(
      {"bytes", "Bytes moved per step", "step", "GB per step",
       non_empty(series({"storage_read_bytes", "storage_write_bytes", "h2d_bytes", "d2h_bytes"}))});
  std::vector<Series> busy = series({"iter_s", "roofline_s"});
  for (const Tracked& t : busy_) busy.push_back(series(t));
  out.push_back({"busy", "Busy time per resource against the roofline", "step", "seconds per step",
                 non_empty(std::move(busy))});
  out.push_back({"memory", "Peak memory per tier", "step", "GiB",
                 non_empty(series({"peak_device_bytes", "peak_host_bytes", "planned_device_bytes",
                                   "planned_host_bytes", "device_budget_bytes"}))});
  out.push_back({"checkpoints", "Checkpoints: time written, and time training stood still",
                 "step the checkpoint holds", "seconds",
                 non_empty({series(writes_), series(stalls_)})});
  return out;
}

}  // namespace strata::report
