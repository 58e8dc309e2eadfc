// OffloadState (train/offload_state.h): slot memory, the store, slot I/O, a block's working
// params to and from its store, and the initial state.
#include "train/offload_state.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "backend/cpu/kernels.h"
#include "core/dtype.h"
#include "core/format.h"
#include "core/log.h"
#include "core/math_util.h"
#include "core/slow_progress.h"
#include "io/configured_engine.h"
#include "model/init.h"
#include "sched/slot_names.h"

namespace strata {

namespace names = slot_names;

OffloadState::OffloadState(Device& dev, Communicator& world, const OffloadShape& shape, Stream& h2d,
                           Stream& d2h)
    : dev_(dev), world_(world), sh_(shape), h2d_(h2d), d2h_(d2h) {}

OffloadState::~OffloadState() {
  // Removed while the store still holds their locks (Note [One run per store file]), so a run
  // that starts meanwhile cannot take a file this one is about to remove.
  for (const std::string& f : store_files()) {
    std::error_code ec;
    std::filesystem::remove(f, ec);
    // Gone already is fine; one left behind (up to the whole preallocation) is the user's to know.
    if (ec && ec != std::errc::no_such_file_or_directory) {
      log_warn("cannot remove the store file " + f + ": " + ec.message() + "; remove it by hand");
    }
  }
  store_.reset();
  engine_.reset();
}

std::string OffloadState::state_slot_on(Tier tier) const {
  for (const auto& [name, memory] : memory_) {
    if (!memory->state_slabs.empty() && memory->tier == tier) return name;
  }
  return "";
}

Status OffloadState::allocate(const std::vector<const Plan*>& plans) {
  // Slots with one name are one piece of memory in every plan (state that outlives a plan).
  std::vector<ExtentSpec> extents;
  for (const Plan* plan : plans) {
    for (const Slot& s : plan->slots) {
      auto it = memory_.find(s.name);
      if (it != memory_.end()) {
        if (it->second->tier != s.tier || it->second->bytes != s.bytes) {
          return Status(ErrorCode::internal, "slot '" + s.name + "' differs between plans");
        }
        continue;
      }
      auto m = std::make_unique<SlotMemory>();
      m->name = s.name;
      m->tier = s.tier;
      m->bytes = s.bytes;
      if (s.tier == Tier::storage) {
        m->extent = extents.size();
        extents.push_back(ExtentSpec{s.name, static_cast<uint64_t>(s.bytes)});
      } else if (s.tier == Tier::host) {
        // Rounded so that direct I/O may move whole 4 KiB blocks (Note [Direct ranges]).
        STRATA_ASSIGN_OR_RETURN(m->buf,
                                dev_.alloc_host(round_up(std::max<int64_t>(s.bytes, 1), kIoAlign)));
        std::memset(m->buf.data(), 0, static_cast<size_t>(m->buf.bytes()));
      } else {
        STRATA_ASSIGN_OR_RETURN(m->buf, dev_.alloc(std::max<int64_t>(s.bytes, 1)));
      }
      planned_bytes_[static_cast<size_t>(s.tier)] += s.bytes;
      memory_.emplace(s.name, std::move(m));
    }
  }
  mark_state_slots();
  if (extents.empty()) return Status::ok_status();
  return create_store(extents);
}

void OffloadState::mark_state_slots() {
  // The slots holding training state, for snapshots (Note [Asynchronous checkpoints]).
  const ParamLayout& layout = sh_.layout;
  memory_.at(names::kEmbedOptim)->state_slabs = {layout.embed_slab(), layout.final_slab()};
  for (int64_t l = 0; l < sh_.cfg.model.n_layer; ++l) {
    for (const auto& [name, part] : optim_parts(l)) {
      SlotMemory& m = *memory_.at(name);
      m.state_slabs = {layout.block_slab(l)};
      m.part = part;
    }
    if (memory_.count(names::optim_spec(l)) != 0) {
      memory_.at(names::optim_spec(l))->state_slabs = {layout.block_slab(l)};
    }
  }
}

Status OffloadState::create_store(const std::vector<ExtentSpec>& extents) {
  const IoConfig& io = sh_.cfg.io;
  if (io.dirs.empty()) {
    return invalid_argument("io.dirs is empty but the offload placement puts state on storage");
  }
  STRATA_ASSIGN_OR_RETURN(engine_, create_configured_engine(io, io.dirs.front()));
  StoreOptions o;
  o.dirs = io.dirs;
  o.stripe_unit = static_cast<uint64_t>(io.stripe_unit);
  o.checksums = io.checksums;
  o.direct = true;
  // Runs given the same io.dirs each take a store file of their own (Note [One run per store
  // file]); this many at once is far past what one set of SSDs serves well.
  o.instances = 64;
  auto store = TensorStore::create(*engine_, o, extents);
  if (!store.ok() && store.status().code() == ErrorCode::unavailable) {
    log_warn(store.status().message() + "; using buffered I/O");
    o.direct = false;
    store = TensorStore::create(*engine_, o, extents);
  }
  if (!store.ok()) return store.status();
  store_ = std::move(*store);
  return Status::ok_status();
}

int64_t OffloadState::store_bytes() const {
  return store_ ? static_cast<int64_t>(store_->logical_bytes()) : int64_t{0};
}

Status OffloadState::write_slot(const std::string& name, int64_t offset, const void* src,
                                int64_t bytes) {
  SlotMemory& m = *memory_.at(name);
  if (m.tier != Tier::storage) {
    if (m.tier == Tier::device) {
      dev_.copy(h2d_, static_cast<char*>(m.buf.data()) + offset, src, bytes);
      h2d_.synchronize();
    } else {
      std::memcpy(static_cast<char*>(m.buf.data()) + offset, src, static_cast<size_t>(bytes));
    }
    return Status::ok_status();
  }
  return store_io(m, IoOp::write, offset, const_cast<void*>(src), bytes);
}

Status OffloadState::read_slot(const std::string& name, int64_t offset, void* dst, int64_t bytes) {
  SlotMemory& m = *memory_.at(name);
  if (m.tier != Tier::storage) {
    if (m.tier == Tier::device) {
      dev_.copy(d2h_, dst, static_cast<const char*>(m.buf.data()) + offset, bytes);
      d2h_.synchronize();
    } else {
      std::memcpy(dst, static_cast<const char*>(m.buf.data()) + offset, static_cast<size_t>(bytes));
    }
    return Status::ok_status();
  }
  return store_io(m, IoOp::read, offset, dst, bytes);
}

Status OffloadState::store_io(const SlotMemory& m, IoOp op, int64_t offset, void* host,
                              int64_t bytes) {
  // Under O_DIRECT a range that ends the extent moves whole 4 KiB blocks (host buffers are
  // rounded to match): Note [Direct ranges].
  int64_t n = bytes;
  if (store_->options().direct && offset + bytes == m.bytes) n = round_up(bytes, kIoAlign);
  const auto off = static_cast<uint64_t>(offset), len = static_cast<uint64_t>(n);
  auto batch = op == IoOp::read ? store_->read(m.extent, off, host, len)
                                : store_->write(m.extent, off, host, len);
  Status st = batch.ok() ? store_->wait(*batch) : batch.status();
  if (st.ok()) return st;
  std::string files;
  for (const std::string& f : store_files()) files += (files.empty() ? "" : ", ") + f;
  return Status(st.code(), std::string(op == IoOp::read ? "reading" : "writing") + " tensor '" +
                               m.name + "' (bytes " + std::to_string(offset) + ".." +
                               std::to_string(offset + bytes) + ") in " + files + ": " +
                               st.message());
}

std::vector<std::string> OffloadState::store_files() const {
  std::vector<std::string> files;
  if (!store_) return files;
  for (size_t d = 0; d < store_->dir_count(); ++d) files.push_back(store_->file(d).path);
  return files;
}

std::string OffloadState::store_description() const {
  if (!store_) return "";
  std::string d;
  for (const std::string& f : store_files()) d += (d.empty() ? "" : ", ") + f;
  return d + " (" + format_bytes(static_cast<int64_t>(store_->logical_bytes())) + ", " +
         (store_->options().direct ? "O_DIRECT" : "buffered") + ")";
}

float* OffloadState::plan_block_stage() {
  for (const std::string& name :
       {names::grad_store(0), names::kGradWstage.at(0), names::kGradRstage.at(0)}) {
    auto it = memory_.find(name);
    if (it != memory_.end() && it->second->tier == Tier::host &&
        it->second->bytes >= sh_.block_elems * 4) {
      return it->second->buf.f32();
    }
  }
  return nullptr;
}

Status OffloadState::ensure_idle_block_stage() {
  if (plan_block_stage() != nullptr || spare_stage_.bytes() > 0) return Status::ok_status();
  // No host gradient slot or stage holds a whole block (every gradient on storage with none of
  // its stages in the plans, or only shards of gradients kept: Note [Sharded optimizer
  // state]): one block's worth beside what the plan counts, aligned for direct I/O.
  STRATA_ASSIGN_OR_RETURN(spare_stage_, dev_.alloc_host(round_up(sh_.block_elems * 4, kIoAlign)));
  return Status::ok_status();
}

float* OffloadState::idle_block_stage() {
  float* stage = plan_block_stage();
  return stage != nullptr ? stage : spare_stage_.f32();
}

Status OffloadState::write_block_params(int64_t block, const float* master) {
  stage_block_params(0, master, sh_.block_elems);
  return flush_block_params(block);
}

void OffloadState::stage_block_params(int64_t lo, const float* master, int64_t count) {
  if (sh_.bf16) {
    cpu::convert_f32_to_bf16(bf16_stage_.bf16() + lo, master, count);  // (n) bf16
    return;
  }
  float* stage = idle_block_stage() + lo;  // (n) f32
  if (stage != master) std::memcpy(stage, master, static_cast<size_t>(count * 4));
}

Status OffloadState::flush_block_params(int64_t block) {
  return params_store_io(IoOp::write, block,
                         sh_.bf16 ? bf16_stage_.data() : static_cast<void*>(idle_block_stage()));
}

Status OffloadState::read_block_params(int64_t block, float* out) {
  const int64_t n = sh_.block_elems;
  if (sh_.bf16) {
    STRATA_RETURN_IF_ERROR(params_store_io(IoOp::read, block, bf16_stage_.data()));
    cpu::convert_bf16_to_f32(out, bf16_stage_.bf16(), n);
    return Status::ok_status();
  }
  float* stage = idle_block_stage();  // (n) f32
  STRATA_RETURN_IF_ERROR(params_store_io(IoOp::read, block, stage));
  std::memcpy(out, stage, static_cast<size_t>(n * 4));
  return Status::ok_status();
}

Status OffloadState::params_store_io(IoOp op, int64_t block, void* stage, int32_t part) {
  const std::string name = names::params_store(block);
  char* at = static_cast<char*>(stage);  // (block elems) f32 or bf16
  // Note [Sharded working params]: this rank's ranges, as the plans move them (one rank: the
  // part's range, or the whole block).
  for (const StoreRange& r : params_store_ranges(sh_.shard_spec, part)) {
    STRATA_RETURN_IF_ERROR(op == IoOp::write
                               ? write_slot(name, r.store_at, at + r.stage_at, r.bytes)
                               : read_slot(name, r.store_at, at + r.stage_at, r.bytes));
  }
  if (op == IoOp::write || !sh_.sharded()) return Status::ok_status();
  for (int32_t q : block_param_parts(sh_.shard_spec, part)) {
    STRATA_RETURN_IF_ERROR(gather_params(at, q));
  }
  return Status::ok_status();
}

Status OffloadState::gather_params(void* params, int32_t part) {
  const OffloadShape::ParamsPart p = sh_.params_part(part);
  char* block = static_cast<char*>(params);  // (block elems) f32 or bf16
  return world_.all_gather(block + p.at, p.count, p.width);
}

Status OffloadState::initialize() {
  const int64_t n = sh_.block_elems;
  // Staging for storage writes comes from slots that are idle before step 1 (a host gradient
  // slot, an optimizer stage), so the host peak stays what the plan says. bf16 (Note [Precision
  // modes]): the working params go through bf16_stage_, one block's bf16 beside the plan.
  if (sh_.bf16) {
    STRATA_ASSIGN_OR_RETURN(bf16_stage_, dev_.alloc_host(round_up(n * 2, kIoAlign)));
    std::memset(bf16_stage_.data(), 0, static_cast<size_t>(bf16_stage_.bytes()));
  }
  STRATA_RETURN_IF_ERROR(ensure_idle_block_stage());
  if (sh_.frozen_elems > 0) {  // Note [Frozen base]: frozen_pieces' buffers
    const int64_t unit = 2 * sh_.shard_spec.grad_io_elems;  // the prefix's I/O unit (elements)
    frozen_chunk_ = std::min(sh_.frozen_elems, round_up(int64_t{1} << 20, unit));
    STRATA_ASSIGN_OR_RETURN(
        frozen_raw_, dev_.alloc_host(round_up(frozen_chunk_ * (sh_.bf16 ? 2 : 4), kIoAlign)));
    STRATA_ASSIGN_OR_RETURN(frozen_state_, dev_.alloc_host(frozen_chunk_ * 12));
  }
  float* slab = idle_block_stage();  // (n)
  SlowProgress progress("initializing the parameters and optimizer state", sh_.cfg.model.n_layer,
                        "blocks");
  for (int64_t l = 0; l < sh_.cfg.model.n_layer; ++l) {
    progress.update(l);
    std::memset(slab, 0, static_cast<size_t>(n * 4));
    init_param_slab(sh_.layout, sh_.layout.block_slab(l), slab,
                    static_cast<uint64_t>(sh_.cfg.seed));
    STRATA_RETURN_IF_ERROR(write_block_params(l, slab));
    for (const auto& [name, part] : optim_parts(l)) {
      SlotMemory& sm = *memory_.at(name);
      const PartShard sh = sh_.owned_part(part);  // Note [Sharded optimizer state]
      const int64_t S = sh.stride;
      // (3, S): master, m, v of this rank's shard of the part.
      const bool on_storage = sm.tier == Tier::storage;
      float* state = on_storage ? memory_.at(names::kOptimStage.at(0))->buf.f32() : sm.buf.f32();
      std::memset(state, 0, static_cast<size_t>(S * 12));
      std::memcpy(state, slab + sh.begin, static_cast<size_t>((sh.end - sh.begin) * 4));
      if (on_storage) STRATA_RETURN_IF_ERROR(write_slot(name, 0, state, S * 12));
    }
  }
  // The embed group: params on the device, the master copy and zeroed moments in its state.
  // Built in its host params slot, idle before step 1.
  const int64_t E = sh_.embed_elems;
  const int64_t ne = sh_.layout.slabs[static_cast<size_t>(sh_.layout.embed_slab())].numel;
  float* group = memory_.at(names::kEmbedParamsHost)->buf.f32();  // (E)
  std::memset(group, 0, static_cast<size_t>(E * 4));
  init_param_slab(sh_.layout, sh_.layout.embed_slab(), group, static_cast<uint64_t>(sh_.cfg.seed));
  init_param_slab(sh_.layout, sh_.layout.final_slab(), group + ne,
                  static_cast<uint64_t>(sh_.cfg.seed));
  STRATA_RETURN_IF_ERROR(embed_state_io(IoOp::write, 0, group, E));
  if (sh_.bf16) {
    round_to_bf16(group, group, E);  // f32 on the device
  }
  STRATA_RETURN_IF_ERROR(write_slot(names::kEmbedParams, 0, group, E * 4));
  std::memset(slab, 0, static_cast<size_t>(n * 4));
  for (int64_t at = E; at < 3 * E; at += n) {  // m = v = 0, a block's worth at a time
    STRATA_RETURN_IF_ERROR(
        write_slot(names::kEmbedOptim, at * 4, slab, std::min(n, 3 * E - at) * 4));
  }
  return Status::ok_status();
}

void OffloadState::adopt_speculative_state() {
  // Between runs nothing reads either slot; the names keep their roles and their state_slabs,
  // the memory behind them trades places.
  for (int64_t l = 0; l < sh_.cfg.model.n_layer; ++l) {
    SlotMemory& store = *memory_.at(names::optim_store(l, 0));
    SlotMemory& spec = *memory_.at(names::optim_spec(l));
    std::swap(store.buf, spec.buf);
    std::swap(store.extent, spec.extent);
  }
}

}  // namespace strata
