// activations.policy "auto" for the vertical schedule: per block, keep the saved activations on
// the device, offload them, or recompute the forward, decided once before the plans are built.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "sched/schedule_spec.h"
#include "train/offload_shape.h"

namespace strata {

// The per-block policy the plans use (ScheduleSpec::acts_at; empty when the plans save no
// activations). With "auto" it keeps the last blocks on the device as far as memory.device_bytes
// allows, offloads the rest where storage hides the write behind one block's forward (measured
// on `dev`), recomputes otherwise, and logs the choice with its reasons; any other policy is the
// spec's as configured.
std::vector<ActPolicy> decide_activation_policy(Device& dev, const OffloadShape& shape);

}  // namespace strata
