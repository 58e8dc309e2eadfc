#include "train/trainer.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/targets.h"
#include "model/lora.h"
#include "train/in_memory_trainer.h"
#include "train/offload_trainer.h"

namespace strata {

Status Trainer::read_slab_state(int64_t slab, float* master, float* m, float* v) {
  return read_slab_pieces(slab, [&](const SlabPiece& p) {
    const auto bytes = static_cast<size_t>(p.count) * sizeof(float);
    std::memcpy(master + p.begin, p.master, bytes);
    std::memcpy(m + p.begin, p.m, bytes);
    std::memcpy(v + p.begin, p.v, bytes);
    return Status();
  });
}

Status Trainer::write_slab_state(int64_t slab, const float* master, const float* m,
                                 const float* v) {
  return write_slab_pieces(slab, [&](const SlabPiece& p) {
    const auto bytes = static_cast<size_t>(p.count) * sizeof(float);
    std::memcpy(p.master, master + p.begin, bytes);
    std::memcpy(p.m, m + p.begin, bytes);
    std::memcpy(p.v, v + p.begin, bytes);
    return Status();
  });
}

SlabPieceFn Trainer::clipped_to(Range share, const SlabPieceFn& take) {
  return [share, &take](const SlabPiece& p) {
    const int64_t a = std::max(p.begin, share.begin);
    const int64_t b = std::min(p.begin + p.count, share.end);
    if (a >= b) return Status();
    const int64_t skip = a - p.begin;
    return take({a, b - a, p.master + skip, p.m + skip, p.v + skip});
  };
}

Status Trainer::read_shard_pieces(int64_t slab, int rank, int ranks, const SlabPieceFn& take) {
  const int64_t numel = layout().slabs.at(static_cast<size_t>(slab)).numel;
  return read_slab_pieces(slab, clipped_to(shard_range(numel, ranks, rank), take));
}

Result<StateSnapshot> Trainer::begin_snapshot() {
  return unavailable(
      "this trainer takes no snapshots behind training (its state is saved at a "
      "standstill)");
}

Result<nlohmann::json> Trainer::last_step_trace() const {
  return unavailable("this trainer records no trace (an offloaded schedule does)");
}

Status check_matmul_precision(const Device& dev, const TrainConfig& cfg) {
  if (cfg.matmul != MatmulPrecision::bf16) return Status::ok_status();
  STRATA_RETURN_IF_ERROR(check_matmul_needs_bf16_weights(cfg));
  if (!dev.supports(Capability::bf16_matmul)) return dev.unsupported(Capability::bf16_matmul);
  return Status::ok_status();
}

Result<int64_t> step_counted_targets(Communicator& world, const int32_t* targets, int64_t n) {
  double counted = static_cast<double>(counted_targets(targets, n));  // exact below 2^53
  if (world.size() > 1) STRATA_RETURN_IF_ERROR(world.all_reduce_sum(&counted, 1));
  return static_cast<int64_t>(counted);
}

Status check_world(const TrainConfig& cfg, const Communicator& world) {
  if (cfg.ranks == world.size()) return Status::ok_status();
  return invalid_argument("the config is for " + std::to_string(cfg.ranks) +
                          " ranks but the run has " + std::to_string(world.size()) + " (" +
                          world.describe() + ")");
}

Result<std::unique_ptr<Trainer>> create_trainer(Device& dev, const TrainConfig& cfg,
                                                Communicator& world,
                                                std::unique_ptr<PeerTransport> device_transport) {
  STRATA_RETURN_IF_ERROR(check_lora(cfg));
  if (cfg.schedule == Schedule::in_memory) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<InMemoryTrainer> t,
                            InMemoryTrainer::create(dev, cfg, world, std::move(device_transport)));
    return std::unique_ptr<Trainer>(std::move(t));
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<OffloadTrainer> t,
                          OffloadTrainer::create(dev, cfg, world, std::move(device_transport)));
  return std::unique_ptr<Trainer>(std::move(t));
}

}  // namespace strata
