// create_configured_device (sched/trainer.h), in a file of its own: the one reference from the
// library to the CUDA backend. Note [Unity build] in CMakeLists.txt keeps it out of the batches,
// so only a binary that creates a configured device loads the CUDA libraries.
#include "backend/backend.h"
#include "sched/trainer.h"

namespace strata {

Result<std::unique_ptr<Device>> create_configured_device(const TrainConfig& cfg) {
  switch (cfg.device) {
    case DeviceKind::cpu:
    case DeviceKind::cpu_discrete: {
      CpuDeviceOptions o;
      o.device_budget_bytes = cfg.memory.device_bytes;
      o.discrete = cfg.device == DeviceKind::cpu_discrete;
      return create_cpu_device(o);
    }
    case DeviceKind::cuda: {
      auto dev = create_cuda_device(0, cfg.memory.device_bytes);
      if (!dev.ok()) {
        return Status(dev.status().code(),
                      "device cuda cannot run here: " + dev.status().message());
      }
      return dev;
    }
  }
  return invalid_argument("device: unknown kind");
}

}  // namespace strata
