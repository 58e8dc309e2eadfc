// The storage engine a run asks for in its config (the "io" section): the engine kind with its
// queue depth, block size and workers, the fault injector when io.faults is set, and the rate
// limiter when a direction is limited. One place, so tests, `strata bench-io` and the offloaded
// schedules all build the same stack.
#pragma once

#include <memory>
#include <string>

#include "core/config.h"
#include "io/io_engine.h"

namespace strata {

// probe_dir: where "auto" may probe io_uring + O_DIRECT (a storage directory).
Result<std::unique_ptr<IoEngine>> create_configured_engine(const IoConfig& io,
                                                           const std::string& probe_dir);

}  // namespace strata
