// create_configured_device and create_configured_transport (train/trainer.h), in a file of their
// own: the library's references to the CUDA backend and NCCL. Note [Unity build] in
// CMakeLists.txt keeps it out of the batches, so only a binary that creates a configured device
// loads the CUDA libraries.
#include "backend/backend.h"
#include "core/log.h"
#include "dist/peer_transport.h"
#include "train/offload_spec.h"
#include "train/trainer.h"

namespace strata {

Result<std::unique_ptr<Device>> create_configured_device(const TrainConfig& cfg, int local_rank) {
  switch (cfg.device) {
    case DeviceKind::cpu:
    case DeviceKind::cpu_discrete: {
      CpuDeviceOptions o;
      o.device_budget_bytes = cfg.memory.device_bytes;
      o.discrete = cfg.device == DeviceKind::cpu_discrete;
      return create_cpu_device(o);
    }
    case DeviceKind::cuda: {
      const int gpus = cuda_device_count();
      auto dev = create_cuda_device(gpus > 0 ? local_rank % gpus : 0, cfg.memory.device_bytes);
      if (!dev.ok()) {
        return Status(dev.status().code(),
                      "device cuda cannot run here: " + dev.status().message());
      }
      return dev;
    }
  }
  return invalid_argument("device: unknown kind");
}

namespace {

// Why this rank cannot sum on the device ("" if it can), before any transport is made.
std::string device_sum_obstacle(const TrainConfig& cfg, const Communicator& world) {
  if (cfg.device != DeviceKind::cuda) return "";
  const int gpus = cuda_device_count();
  if (world.local_size() > gpus) {
    return std::to_string(world.local_size()) + " ranks on this machine share " +
           std::to_string(gpus) + " GPU(s), and NCCL needs a GPU per rank";
  }
  return "";
}

// No transport: the sum is taken on the host, or, where "device" was asked for, the run refused.
Result<std::unique_ptr<PeerTransport>> sum_on_host(bool asked, const std::string& why) {
  if (asked) return invalid_argument("collectives device: " + why);
  log_info("collectives auto: gradients summed on the host (" + why + ")");
  return std::unique_ptr<PeerTransport>();
}

}  // namespace

Result<std::unique_ptr<PeerTransport>> create_configured_transport(const TrainConfig& cfg,
                                                                   Device& dev,
                                                                   Communicator& world) {
  const bool asked = cfg.collectives == CollectivesPlace::device;
  if (world.size() == 1 || !wants_device_collectives(cfg, cfg.device == DeviceKind::cuda)) {
    return std::unique_ptr<PeerTransport>();
  }
  // Every rank must choose alike, since a transport is made by all ranks together: they agree on
  // whether any of them cannot before any makes one. (Building without NCCL or MPI, the other
  // reason, is the same on every rank: the same binary.)
  const std::string obstacle = device_sum_obstacle(cfg, world);
  STRATA_ASSIGN_OR_RETURN(const int64_t any_cannot, world.all_reduce_max(obstacle.empty() ? 0 : 1));
  if (any_cannot != 0) {
    return sum_on_host(asked, obstacle.empty() ? "another rank's machine cannot" : obstacle);
  }
  auto transport = cfg.device == DeviceKind::cuda ? make_nccl_peer_transport(dev, world)
                                                  : make_mpi_peer_transport(world);
  if (transport.ok() || transport.status().code() != ErrorCode::unavailable) return transport;
  return sum_on_host(asked, transport.status().message());
}

}  // namespace strata
