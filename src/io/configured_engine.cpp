#include "io/configured_engine.h"

#include "core/log.h"
#include "io/fault_injector.h"
#include "io/rate_limited_engine.h"

namespace strata {

Result<std::unique_ptr<IoEngine>> create_configured_engine(const IoConfig& io,
                                                           const std::string& probe_dir) {
  IoEngineOptions o;
  o.kind = io.engine;
  o.queue_depth = static_cast<int>(io.queue_depth);
  o.block_size = static_cast<uint64_t>(io.block_size);
  o.workers = static_cast<int>(io.workers);
  if (!io.faults.empty()) {
    auto hook = parse_fault_spec(io.faults);
    if (!hook.ok()) return invalid_argument("io.faults: " + hook.status().message());
    o.fault_hook = hook.value();
    log_warn("fault injection is on (io.faults = \"" + io.faults + "\")");
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> engine, create_io_engine(o, probe_dir));
  if (io.read_bytes_per_s == 0 && io.write_bytes_per_s == 0) return engine;
  RateLimits limits;
  limits.read_bytes_per_s = static_cast<uint64_t>(io.read_bytes_per_s);
  limits.write_bytes_per_s = static_cast<uint64_t>(io.write_bytes_per_s);
  log_info("storage rate limit: read " + std::to_string(io.read_bytes_per_s) + " B/s, write " +
           std::to_string(io.write_bytes_per_s) + " B/s (0: unlimited)");
  return std::unique_ptr<IoEngine>(new RateLimitedEngine(std::move(engine), limits));
}

}  // namespace strata
