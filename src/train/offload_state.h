// The offloaded trainer's memory and the state in it: every plan slot's memory (device buffers,
// pinned host buffers, extents of one striped store over io.dirs), and the training state kept
// there moved outside plans: the initial parameters and optimizer state, whole-slab reads and
// writes for checkpoints and read_params, the working params of a block to and from its store.
// Each goes through the slots' own memory, staged through slots idle between steps, so the host
// peak stays what the plan says (bf16 mode adds one block's bf16 stage of its own).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "io/host_buffer.h"
#include "io/io_engine.h"
#include "io/tensor_store.h"
#include "model/slab_piece.h"
#include "sched/plan.h"
#include "train/offload_shape.h"

namespace strata {

// Host slot buffers are whole direct-I/O blocks, and a transfer that ends an extent moves whole
// blocks (Note [Direct ranges] in io/tensor_store.h).
inline constexpr auto kIoAlign = static_cast<int64_t>(kDirectIoAlignment);

// The memory behind one slot name, shared by every plan that names it.
struct SlotMemory {
  std::string name;
  Tier tier = Tier::host;
  int64_t bytes = 0;
  Buffer buf;         // device or host tier
  size_t extent = 0;  // storage tier: the store's extent
  // Training state the slot holds (Note [Asynchronous checkpoints]): the slabs whose master and
  // moments live in it (a block's optimizer part or its speculative part 0, or the embed group's
  // state for the embedding and final slabs; none for other slots), and which part of a block's
  // state it is (0, 1; -1: none, or the whole), which the vertical schedule's pending steps may
  // write.
  std::vector<int64_t> state_slabs;
  int32_t part = -1;
};

class OffloadState {
 public:
  // h2d and d2h: the streams whole-slot copies to and from device slots run on.
  OffloadState(Device& dev, Communicator& world, const OffloadShape& shape, Stream& h2d,
               Stream& d2h);
  ~OffloadState();  // removes the store's files: they are the run's scratch space
  OffloadState(const OffloadState&) = delete;
  OffloadState& operator=(const OffloadState&) = delete;

  // Memory for every slot of `plans` (a name is one piece of memory in every plan), and the
  // store when some slot is on storage (no_space naming the directory when it cannot hold it).
  Status allocate(const std::vector<const Plan*>& plans);
  // The initial parameters (model/init.h) and zeroed moments, in every slot that holds them.
  Status initialize();

  SlotMemory& slot(const std::string& name) const { return *memory_.at(name); }
  const std::unordered_map<std::string, std::unique_ptr<SlotMemory>>& slots() const {
    return memory_;
  }
  // Bytes of each tier the slots hold (device, host, storage), and the host buffers beside them
  // once counted (Note [Host memory beside the plan] in offload_snapshot.cpp).
  std::array<int64_t, kTierCount> planned_bytes() const { return planned_bytes_; }
  // The name of a slot holding optimizer state on `tier`, or "" when none does.
  std::string state_slot_on(Tier tier) const;
  void count_host_beside_plan(int64_t bytes) {
    planned_bytes_[static_cast<size_t>(Tier::host)] += bytes;
  }

  // Whole-slot access by name outside plans, and one storage transfer, waited; errors name the
  // tensor and the file.
  Status write_slot(const std::string& name, int64_t offset, const void* src, int64_t bytes);
  Status read_slot(const std::string& name, int64_t offset, void* dst, int64_t bytes);
  Status store_io(const SlotMemory& m, IoOp op, int64_t offset, void* host, int64_t bytes);
  // The store's files, "dir/strata.store" (or a later instance's name) per directory, and a line
  // saying where it lives; none and "" without a store.
  std::vector<std::string> store_files() const;
  std::string store_description() const;
  int64_t store_bytes() const;

  // A block's working params (params.store.blkL) from its f32 master, and back as f32: the
  // master itself (staged through idle_block_stage), or in bf16 mode its rounding (through
  // bf16_stage_; Note [Precision modes]). write_block_params in pieces: stage_block_params of
  // elements [lo, lo + count), then flush_block_params of the whole block.
  Status write_block_params(int64_t block, const float* master);
  Status read_block_params(int64_t block, float* out);
  void stage_block_params(int64_t lo, const float* master, int64_t count);
  Status flush_block_params(int64_t block);
  // Part `part` (-1: all) of a block's params store from or to `stage` (the block's f32 or bf16
  // params, in its layout): with one rank the part's range; with several this rank's ranges,
  // and a read then gathers every rank's shard (Note [Sharded working params]: a collective).
  Status params_store_io(IoOp op, int64_t block, void* stage, int32_t part = -1);
  // Every rank's shard of part `part` of a block's working params at `params` (the block's).
  Status gather_params(void* params, int32_t part);
  // Every parameter, in layout order, as f32 (Trainer::read_params after the pending steps).
  Status read_params(float* host);

  // Block state parts: the slot names of a block's optimizer state ("optim.store.blkL" or its
  // ".p0"/".p1"), with their part numbers.
  std::vector<std::pair<std::string, int32_t>> optim_parts(int64_t block) const;
  // Optimizer stage 0, which stages state I/O between steps (null when no state is on storage).
  float* optim_stage0();
  // A slab's state as it is now, in pieces (Note [Slab pieces]), state on storage read through
  // `stage` (an optimizer stage's bytes). Of a sharded block every rank's shard (a collective:
  // each broadcast by its owner), or with Shards::own_only this rank's alone. A read of the
  // embedding or final slab hands over at least the elements in `within` (on storage, only the
  // chunks that hold some of them are read).
  enum class Shards { every_rank, own_only };
  Status state_pieces(int64_t slab, float* stage, const SlabPieceFn& take,
                      Shards shards = Shards::every_rank, Range within = {0, INT64_MAX});
  Status write_slab_pieces(int64_t slab, const SlabPieceFn& fill);
  // Note [Speculative steps]: optim.spec's memory becomes part 0's state (the names keep their
  // roles and state_slabs). Between runs only: nothing reads either slot then.
  void adopt_speculative_state();

 private:
  // One block's f32 worth of host memory that no plan uses between steps (a gradient slot or
  // stage), for the state moved outside plans; never an optimizer stage, which the same moves
  // use beside it. plan_block_stage: the plan's slot it uses (null when none holds a block);
  // else spare_stage_, allocated by initialize before any use.
  float* idle_block_stage();
  float* plan_block_stage();
  Status ensure_idle_block_stage();
  Status create_store(const std::vector<ExtentSpec>& extents);
  void mark_state_slots();
  // Elements [at, at + elems) of the embed group's (3, E) optimizer state to or from `data`,
  // wherever the state lives (through idle_block_stage on storage).
  Status embed_state_io(IoOp op, int64_t at, float* data, int64_t elems);
  // The embed group's elements [lo, lo + len) of master, m and v to or from `stage`, laid out
  // (3, len), with the state on storage.
  Status embed_chunk_io(IoOp op, int64_t lo, int64_t len, float* stage);
  // Note [Frozen base]: the pieces of a block's frozen prefix, which has no optimizer state: its
  // working params as the master and zero moments, handed over (read) or taken into the block's
  // params stage (write), frozen_chunk_ elements at a time.
  Status frozen_pieces(int64_t block, IoOp op, const SlabPieceFn& fn);
  // state_pieces / write_slab_pieces of the embedding or the final norm slab.
  Status embed_slab_pieces(IoOp op, int64_t slab, float* stage, const SlabPieceFn& fn,
                           Range within = {0, INT64_MAX});

  Device& dev_;
  Communicator& world_;
  const OffloadShape& sh_;
  Stream& h2d_;
  Stream& d2h_;
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<TensorStore> store_;
  std::unordered_map<std::string, std::unique_ptr<SlotMemory>> memory_;  // by slot name
  std::array<int64_t, kTierCount> planned_bytes_{};
  Buffer spare_stage_;  // (block_elems) f32: idle_block_stage when no plan slot serves
  // Sharded state read or written outside plans: (3, stride) of another rank's shard of a part.
  std::vector<float> shard_stage_;
  // bf16 mode: (block elems) bf16 on host, whole direct-I/O blocks; stages a block's working
  // params between the caller and params.store.blkL outside plans (initial state, read_params,
  // write_slab_pieces). Owned here rather than borrowed from an idle plan slot, so it does not
  // depend on which slots a plan has; 2 bytes per element of one block beyond the plan's peak.
  Buffer bf16_stage_;
  // Note [Frozen base]: frozen_pieces' chunk of working params as stored (f32 or bf16, whole
  // direct-I/O blocks), and (3, chunk) f32 master, m, v; empty when nothing is frozen.
  int64_t frozen_chunk_ = 0;
  Buffer frozen_raw_, frozen_state_;
};

}  // namespace strata
