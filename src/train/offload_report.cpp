// The offloaded trainer's reporting: the plan in the log, per-step metrics, the trace.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/format.h"
#include "train/offload_trainer.h"

namespace strata {

std::vector<std::string> OffloadTrainer::describe() const {
  const auto bytes = state_->planned_bytes();
  std::string line = std::string("schedule ") + enum_name(shape_.cfg.schedule) + ": plan holds " +
                     format_bytes(bytes[static_cast<size_t>(Tier::device)]) + " device, " +
                     format_bytes(bytes[static_cast<size_t>(Tier::host)]) + " host, " +
                     format_bytes(bytes[static_cast<size_t>(Tier::storage)]) + " storage";
  if (shape_.vertical) {
    char alpha[64];
    std::snprintf(alpha, sizeof alpha, "; optimizer alpha %.3g",
                  shape_.cfg.optim.alpha_or_default());
    line += alpha;
    if (shape_.speculative) {
      line += std::string(", part 0 speculative with clipping on (optim.speculation ") +
              enum_name(shape_.cfg.optim.speculation) + ")";
    }
  }
  std::vector<std::string> lines = {line};
  if (shape_.sharded()) {  // Note [Sharded optimizer state]
    const std::string n = std::to_string(world_.size());
    lines.push_back("state sharded over " + n + " ranks: each owns 1/" + n +
                    " of every block's masters, moments" +
                    (shape_.grads_sharded() ? ", kept gradient" : "") +
                    " and working weights (a fetch gathers the block)");
    // Note [ZeRO-3 on the device]
    lines.push_back("block gradients reduce-scattered and params gathered by " +
                    (actions_->device_sum() != nullptr
                         ? actions_->device_sum()->describe() + ": each rank moves 1/" + n +
                               " of a block's gradient and params between host and device"
                         : world_.describe() + ", in host memory"));
  }
  if (!state_->store_files().empty()) lines.push_back("store: " + state_->store_description());
  return lines;
}

void OffloadTrainer::add_step_metrics(nlohmann::json& line, double iter_s) const {
  if (last_ == nullptr) return;
  const PlanTraffic& t = last_->traffic;
  line["storage_read_bytes"] = step_bytes_on(*last_, Resource::storage_read);
  line["storage_write_bytes"] = step_bytes_on(*last_, Resource::storage_write);
  line["h2d_bytes"] = step_bytes_on(*last_, Resource::h2d);
  line["d2h_bytes"] = step_bytes_on(*last_, Resource::d2h);
  line["acts_storage_read_bytes"] = t.of(StateKind::acts, Resource::storage_read);
  line["acts_storage_write_bytes"] = t.of(StateKind::acts, Resource::storage_write);
  line["acts_forwarded_sets"] = last_->acts_forwarded;
  // Note [Speculative steps]: what the step's part 0 did.
  if (shape_.speculative) {
    static constexpr const char* kModes[] = {"plain", "speculated", "repaired", "waited"};
    line["speculation"] = kModes[static_cast<size_t>(last_mode_)];
    line["clip_rate"] = policy_.clip_rate();
  }
  // What the run holds: the plans' peak per tier (the budgets' fit) and the store's size.
  line["planned_device_bytes"] = state_->planned_bytes()[static_cast<size_t>(Tier::device)];
  line["planned_host_bytes"] = state_->planned_bytes()[static_cast<size_t>(Tier::host)];
  line["store_bytes"] = state_->store_bytes();
  // The roofline: the busiest resource, compute and the CPU optimizer counted as one since they
  // share the cores.
  nlohmann::json busy = nlohmann::json::object();
  const auto& b = last_report_.busy_s;
  double roofline = 0;
  for (int r = 0; r < kResourceCount; ++r) {
    // A run of one rank has no net queue (Note [Data parallel ranks]).
    if (static_cast<Resource>(r) == Resource::net && shape_.cfg.ranks == 1) continue;
    busy[resource_name(static_cast<Resource>(r))] = b[static_cast<size_t>(r)];
    if (static_cast<Resource>(r) != Resource::cpu_optim) {
      roofline = std::max(roofline, b[static_cast<size_t>(r)]);
    }
  }
  const double cores =
      b[static_cast<size_t>(Resource::compute)] + b[static_cast<size_t>(Resource::cpu_optim)];
  line["busy_s"] = busy;
  line["roofline_s"] = std::max(roofline, cores);
  line["over_roofline"] = iter_s / std::max(std::max(roofline, cores), 1e-12);
}

Result<nlohmann::json> OffloadTrainer::last_step_trace() const {
  if (last_ == nullptr)
    return Status(ErrorCode::internal, "no step has run yet, so there is no trace");
  return execution_trace_json(last_->plan, last_report_);
}

}  // namespace strata
