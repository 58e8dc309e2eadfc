// The offloaded trainer: plans, slot memory, initial state, and the step loop. The task actions
// are in offload_actions.cpp.
#include "train/offload_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/format.h"
#include "core/log.h"
#include "io/configured_engine.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/rope.h"
#include "train/offload_internal.h"
#include "sched/plan_checker.h"
#include "sched/schedule_horizontal.h"
#include "sched/schedule_vertical.h"
#include "sched/slot_names.h"

namespace strata {

namespace names = slot_names;

namespace {

// Elements of the embed group: the embedding slab then the final-norm slab.
int64_t embed_group_elems(const ParamLayout& layout) {
  return layout.slabs[static_cast<size_t>(layout.embed_slab())].numel +
         layout.slabs[static_cast<size_t>(layout.final_slab())].numel;
}

// Bytes a storage transfer of block state may start at and cut at: a direct-I/O block, or a
// whole checksum chunk when checksums are on (Note [Extent checksums] in io/tensor_store.h).
int64_t io_unit_bytes(const TrainConfig& cfg) {
  return cfg.io.checksums ? std::max<int64_t>(cfg.io.stripe_unit, kIoAlign) : kIoAlign;
}

// Part 0 of each block's step (run in backward) holds (1 - alpha) of its elements, rounded to
// whole I/O blocks of the working params (whole checksum chunks when checksums are on, since
// parts are written separately): 1024 elements in f32, 2048 in bf16. Note [Optimizer split].
int64_t split_elems_for(const TrainConfig& cfg, int64_t n) {
  const double alpha = cfg.optim.alpha_or_default();
  if (cfg.schedule != Schedule::vertical || alpha >= 1.0) return 0;
  if (alpha <= 0.0) return n;
  const int64_t width = cfg.precision == Precision::bf16 ? 2 : 4;  // bytes per working param
  const int64_t align = io_unit_bytes(cfg) / width;
  const auto a = static_cast<int64_t>(std::llround((1.0 - alpha) * n / align)) * align;
  return std::clamp<int64_t>(a, 0, n);
}

}  // namespace

ScheduleSpec offload_schedule_spec(const Device& dev, const TrainConfig& cfg, bool pending_steps,
                                   bool iteration) {
  const ParamLayout layout = make_param_layout(cfg.model);
  const int64_t B = cfg.batch_size, T = cfg.seq_len, C = cfg.model.n_embd, V = cfg.model.vocab_size,
                M = cfg.grad_accum, BT = B * T;
  const int64_t n = layout.slabs[static_cast<size_t>(layout.block_slab(0))].numel;
  const int64_t E = embed_group_elems(layout);
  ScheduleSpec s;
  s.blocks = static_cast<int32_t>(cfg.model.n_layer);
  s.micro_batches = static_cast<int32_t>(M);
  s.ranks = cfg.ranks;
  s.shard_grads = cfg.ranks > 1 && cfg.schedule == Schedule::horizontal;
  const bool bf16 = cfg.precision == Precision::bf16;  // Note [Precision modes]
  s.block_param_bytes = n * (bf16 ? 2 : 4);
  s.block_grad_bytes = n * 4;
  s.block_optim_bytes = n * 12;
  s.checkpoint_bytes = BT * C * 4;
  s.embed_param_bytes = E * 4;
  s.embed_optim_bytes = E * 12;
  s.embed_elems = E;
  s.embed_optim = cfg.offload.embed_optim_on_host ? Placement::host : Placement::storage;
  s.tokens_bytes = M * 2 * BT * 4;
  s.losses_bytes = M * BT * 4;
  const BlockDims d = block_dims(dev, cfg.model, B, T);
  FloatCarver counter(nullptr);
  carve_offload_workspace(counter, d, cfg, n);
  s.workspace_bytes = counter.used() * 4;
  // Matmul FLOPs (2 per multiply-add) and the causal half of attention's two T x T products.
  const double bt = static_cast<double>(BT), c = static_cast<double>(C);
  s.block_fwd_flops =
      2.0 * bt * block_matmul_params(cfg.model) + 2.0 * bt * static_cast<double>(T) * c;
  s.block_bwd_flops = 2.0 * s.block_fwd_flops;
  s.head_flops = 6.0 * bt * static_cast<double>(V) * c;
  s.params_at = placement_by_fraction(s.blocks, cfg.offload.params_on_host);
  s.optim_at = placement_by_fraction(s.blocks, cfg.offload.optim_on_host);
  s.checkpoints_at = placement_by_fraction(s.blocks, cfg.offload.checkpoints_on_host);
  s.grads_at = placement_by_fraction(s.blocks, cfg.offload.grads_on_host);
  s.block_elems = n;
  s.split_elems = split_elems_for(cfg, n);
  s.grad_io_elems = io_unit_bytes(cfg) / 4;
  s.acts_bytes = block_saved_floats(d) * 4;
  s.compute_reads_host = shares_host_memory(dev);
  if (cfg.schedule == Schedule::vertical && cfg.activations.policy != ActsMode::recompute) {
    // "auto" starts from offloading everything; OffloadTrainer decides per block.
    const ActPolicy offload =
        cfg.activations.tier == ActsTier::host ? ActPolicy::host : ActPolicy::storage;
    s.acts_at.assign(static_cast<size_t>(s.blocks),
                     cfg.activations.policy == ActsMode::keep ? ActPolicy::keep : offload);
  }
  s.pending_steps = pending_steps;
  s.iteration = iteration;
  // With clipping on, part 0 speculates, or waits with speculation off (Note [Speculative
  // steps]): the plans of a step whose norm does not clip.
  if (s.split_elems > 0 && cfg.optim.grad_clip > 0) {
    const bool wait = cfg.optim.speculation == Speculation::off;
    s.defer_part0 = wait;
    s.pending_part0 = wait && pending_steps;
    s.speculative = !wait && iteration;
  }
  return s;
}

Plan make_offload_plan(const ScheduleSpec& spec, Schedule schedule) {
  return schedule == Schedule::vertical ? make_vertical_plan(spec) : make_horizontal_plan(spec);
}

OffloadTrainer::OffloadTrainer(Device& dev, const TrainConfig& cfg, Communicator& world)
    : dev_(dev), world_(world), cfg_(cfg), layout_(make_param_layout(cfg.model)) {
  schedule_ = LrSchedule{cfg.optim.lr, cfg.optim.warmup_steps, cfg.steps, cfg.optim.min_lr_ratio};
  dims_ = block_dims(dev, cfg.model, cfg.batch_size, cfg.seq_len);  // rope: set by create
  vertical_ = cfg.schedule == Schedule::vertical;
  bf16_ = cfg.precision == Precision::bf16;
  block_elems_ = layout_.slabs[static_cast<size_t>(layout_.block_slab(0))].numel;
  split_elems_ = split_elems_for(cfg, block_elems_);
  embed_elems_ = embed_group_elems(layout_);
  // Note [Optimizer stage size]: the plans' chunks, so the step tasks' `part` means the same here.
  shard_spec_ = offload_schedule_spec(dev, cfg, false, true);
  shard_spec_.rank = world.rank();
  embed_chunk_elems_ = embed_chunk_elems_for(shard_spec_);
  slab_sumsq_.assign(layout_.slabs.size(), 0.0);
  // Note [Data parallel ranks]: the mean over every rank's micro-batches.
  dloss_ = 1.0f / static_cast<float>(cfg.batch_size * cfg.seq_len * cfg.grad_accum * cfg.ranks);
  speculative_ = vertical_ && split_elems_ > 0 && cfg.optim.grad_clip > 0;
  policy_ = SpeculationPolicy(cfg.optim.speculation);
}

std::vector<PlanKey> OffloadTrainer::plan_keys() const {
  if (!vertical_) return {PlanKey{}};
  // What an iteration leaves pending: part 1 after an early part 0, both when part 0 waited.
  const Pending early = split_elems_ < block_elems_ ? Pending::part1 : Pending::none;
  if (!speculative_) {
    return {{.pending = Pending::none}, {.pending = early}, {.pending = early, .iteration = false}};
  }
  const Speculation mode = cfg_.optim.speculation;
  std::vector<bool> defers;
  if (mode != Speculation::off) defers.push_back(false);
  if (mode != Speculation::on) defers.push_back(true);
  std::vector<PlanKey> keys;
  for (Pending pending : {Pending::none, early, Pending::both}) {
    const bool reachable =
        pending == Pending::none ||
        (pending == Pending::both ? mode != Speculation::on : mode != Speculation::off);
    if (!reachable) continue;
    for (bool defer : defers) {
      const PlanKey k{.pending = pending, .defer_part0 = defer};
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
    if (pending != Pending::none) keys.push_back({.pending = pending, .iteration = false});
  }
  if (mode != Speculation::off) keys.push_back({.iteration = false, .repair = true});
  return keys;
}

OffloadTrainer::BoundPlan& OffloadTrainer::plan_for(const PlanKey& key) const {
  for (const auto& bp : plans_) {
    if (bp->key == key) return *bp;
  }
  STRATA_CHECK_MSG(false,
                   "no plan was built for this key: plan_keys() must hold every key a run "
                   "asks for");
  return *plans_.front();
}

PlanKey OffloadTrainer::iteration_key(bool defer_part0) const {
  if (!vertical_) return PlanKey{};
  return {.pending = pending_, .defer_part0 = speculative_ && defer_part0};
}

OffloadTrainer::~OffloadTrainer() {
  // No stream work may outlive the buffers; the store's files are the run's scratch space.
  for (Stream* s : {compute_.get(), h2d_.get(), d2h_.get()}) {
    if (s != nullptr) s->synchronize();
  }
  // Removed while the store still holds their locks (Note [One run per store file]), so a run
  // that starts meanwhile cannot take a file this one is about to remove.
  for (const std::string& f : store_files()) {
    std::error_code ec;
    std::filesystem::remove(f, ec);
  }
  store_.reset();
  engine_.reset();
}

Result<std::unique_ptr<OffloadTrainer>> OffloadTrainer::create(
    Device& dev, const TrainConfig& cfg, Communicator& world,
    std::unique_ptr<PeerTransport> device_transport) {
  if (!is_offloaded(cfg.schedule)) {
    return invalid_argument(std::string("train.schedule '") + enum_name(cfg.schedule) +
                            "' is not an offloaded schedule (horizontal, vertical)");
  }
  STRATA_RETURN_IF_ERROR(check_matmul_precision(dev, cfg));
  STRATA_RETURN_IF_ERROR(check_world(cfg, world));
  std::unique_ptr<OffloadTrainer> t(new OffloadTrainer(dev, cfg, world));
  if (device_transport && world.size() > 1) {  // before the plans: they depend on it
    t->device_sum_ = std::make_unique<DeviceCollectives>(dev, world, std::move(device_transport));
    t->net_stream_ = dev.create_stream("net");
  }
  STRATA_ASSIGN_OR_RETURN(t->rope_, upload_rope_table(dev, cfg.model));
  t->dims_.rope = t->rope_.f32();
  STRATA_RETURN_IF_ERROR(t->decide_activation_policy());
  // Vertical: the first iteration, the steady ones (steps pending from the previous), the
  // flush, and with speculation its repair. Horizontal: one plan.
  for (const PlanKey& key : t->plan_keys()) {
    t->plans_.push_back(std::make_unique<BoundPlan>());
    STRATA_RETURN_IF_ERROR(t->build(key, *t->plans_.back()));
  }
  STRATA_RETURN_IF_ERROR(t->allocate_slots());
  // The collectives' scratch (at most kAllReduceChunkElems floats, 16 MiB, whatever the block),
  // now rather than at the first block, beside the plan's slots.
  if (t->device_sum_) {
    STRATA_RETURN_IF_ERROR(
        t->device_sum_->reserve(std::max(t->block_elems_, t->embed_elems_)));  // embed: all-reduced
  }
  t->compute_ = dev.create_stream("compute");
  t->h2d_ = dev.create_stream("h2d");
  t->d2h_ = dev.create_stream("d2h");
  t->order_by_events_ = !shares_host_memory(dev);  // Note [Ordering by events]
  for (auto& bp : t->plans_) {
    bp->slots.clear();
    for (const Slot& s : bp->plan.slots) bp->slots.push_back(t->memory_.at(s.name).get());
    if (t->order_by_events_) STRATA_RETURN_IF_ERROR(t->prepare_events(*bp));
    bp->actions.clear();
    for (int32_t i = 0; i < static_cast<int32_t>(bp->plan.tasks.size()); ++i) {
      bp->actions.push_back(t->bind(*bp, i));
    }
  }
  STRATA_RETURN_IF_ERROR(t->initialize_state());
  return t;
}

double OffloadTrainer::measure_block_forward_s() {
  // One block's forward on one micro-batch, on this device, with real (initial) weights.
  const int64_t n = block_elems_, BT = cfg_.batch_size * cfg_.seq_len, C = cfg_.model.n_embd;
  FloatCarver counter(nullptr);
  block_acts_carve(counter, dims_);
  auto params = dev_.alloc(n * 4);
  auto io = dev_.alloc(2 * BT * C * 4);
  auto acts = dev_.alloc(counter.used() * 4);
  if (!params.ok() || !io.ok() || !acts.ok()) return 0;  // no room to measure: decided by memory
  std::vector<float> host(static_cast<size_t>(n), 0.0f);
  init_param_slab(layout_, layout_.block_slab(0), host.data(), static_cast<uint64_t>(cfg_.seed));
  auto s = dev_.create_stream("measure");
  dev_.copy(*s, params->data(), host.data(), n * 4);
  dev_.fill_zero(*s, io->data(), 2 * BT * C * 4);
  FloatCarver c(acts->f32());
  const BlockActs a = block_acts_carve(c, dims_);
  const BlockView w = block_slab_view(layout_, params->f32(), 0);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {  // the first warms caches and thread pools up
    const auto t0 = std::chrono::steady_clock::now();
    block_forward(dev_, *s, io->f32() + BT * C, a, io->f32(), w, dims_);
    s->synchronize();
    if (rep > 0) {
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return best;
}

Status OffloadTrainer::decide_activation_policy() {
  const ScheduleSpec base = offload_schedule_spec(dev_, cfg_, false, true);
  acts_policy_ = base.acts_at;
  if (cfg_.activations.policy != ActsMode::automatic || acts_policy_.empty()) {
    return Status::ok_status();
  }
  const int64_t L = cfg_.model.n_layer, M = cfg_.grad_accum, S = base.acts_bytes;
  // Keep (on the device) the last blocks, whose backward comes soonest, as far as the device
  // budget allows beyond what the plan needs with everything offloaded; no budget: keep all.
  int64_t keep = L - 1;
  std::string why_keep = "no device budget (memory.device_bytes = 0)";
  if (cfg_.memory.device_bytes > 0) {
    const int64_t base_device =
        plan_stats(make_offload_plan(base, cfg_.schedule)).bytes_per_tier[0];
    const int64_t room = std::max<int64_t>(cfg_.memory.device_bytes - base_device, 0);
    keep = std::min<int64_t>(L - 1, room / std::max<int64_t>(M * S, 1));
    why_keep = format_bytes(room) + " of the device budget left with everything offloaded, " +
               format_bytes(M * S) + " per kept block";
  }
  // Offload the rest where storage hides it: one micro-batch's saved set written within one
  // micro-batch's forward of its block (the read comes back in a backward three times longer).
  const double f = measure_block_forward_s();
  const double w = static_cast<double>(cfg_.io.write_bytes_per_s);
  const bool to_storage = cfg_.activations.tier == ActsTier::storage;
  const double write_s = to_storage && w > 0 ? static_cast<double>(S) / w : 0.0;
  const bool hidden = write_s <= f;
  std::string kept, offloaded, recomputed;
  for (int64_t l = 0; l < L - 1; ++l) {
    ActPolicy& p = acts_policy_[static_cast<size_t>(l)];
    if (l >= L - 1 - keep) {
      p = ActPolicy::keep;
      kept += (kept.empty() ? "" : ",") + std::to_string(l);
    } else if (hidden) {
      offloaded += (offloaded.empty() ? "" : ",") + std::to_string(l);
    } else {
      p = ActPolicy::recompute;
      recomputed += (recomputed.empty() ? "" : ",") + std::to_string(l);
    }
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "activations (auto): keep blocks [%s] on the device (%s); offload [%s] to %s; "
                "recompute [%s]: a saved set is %s, its write takes %.1f ms against %.1f ms of "
                "forward per micro-batch (%s)",
                kept.c_str(), why_keep.c_str(), offloaded.c_str(), enum_name(cfg_.activations.tier),
                recomputed.c_str(), format_bytes(S).c_str(), write_s * 1e3, f * 1e3,
                hidden ? "hidden behind compute" : "not hidden: recomputing is cheaper");
  log_info(line);
  return Status::ok_status();
}

Status OffloadTrainer::build(const PlanKey& key, BoundPlan& out) {
  out.key = key;
  const bool iteration = key.iteration;
  ScheduleSpec spec = offload_schedule_spec(dev_, cfg_, key.pending != Pending::none, iteration);
  spec.rank = world_.rank();
  spec.device_collectives = device_sum_ != nullptr;
  spec.pending_part0 = key.pending == Pending::both;
  spec.defer_part0 = key.defer_part0;
  spec.speculative = speculative_ && iteration && !key.defer_part0;
  spec.repair = key.repair;
  if (!spec.acts_at.empty()) spec.acts_at = acts_policy_;  // "auto" decided per block
  out.plan = make_offload_plan(spec, cfg_.schedule);
  out.traffic = plan_traffic(out.plan);
  // Saved sets kept in host memory although their block offloads to storage: forwarded.
  out.acts_forwarded = 0;
  for (int32_t l = 0; iteration && l < static_cast<int32_t>(spec.acts_at.size()); ++l) {
    for (int32_t i = 0; i < spec.micro_batches; ++i) {
      out.acts_forwarded += spec.acts_at[static_cast<size_t>(l)] == ActPolicy::storage &&
                            vertical_acts_forwarded(l, i, spec.blocks);
    }
  }
  STRATA_RETURN_IF_ERROR(check_task_signatures(out.plan));
  if (!spec.compute_reads_host) STRATA_RETURN_IF_ERROR(check_task_tiers(out.plan));
  const TierBudgets budgets{cfg_.memory.device_bytes, cfg_.memory.host_bytes, 0};
  Status st = check_plan(out.plan, budgets);
  if (!st.ok()) {
    return Status(st.code(),
                  std::string("the ") + enum_name(cfg_.schedule) +
                      " plan does not fit: " + st.message() +
                      " (lower train.batch_size or train.grad_accum, keep less on host with "
                      "offload.*_on_host, or raise memory.device_bytes / memory.host_bytes)");
  }
  return Status::ok_status();
}

Status OffloadTrainer::allocate_slots() {
  // Slots with one name are one piece of memory in every plan (state that outlives a plan).
  std::vector<ExtentSpec> extents;
  for (auto& bp : plans_) {
    for (const Slot& s : bp->plan.slots) {
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

  // The slots holding training state, for snapshots (Note [Asynchronous checkpoints]).
  memory_.at(names::kEmbedOptim)->state_slabs = {layout_.embed_slab(), layout_.final_slab()};
  for (int64_t l = 0; l < cfg_.model.n_layer; ++l) {
    for (const auto& [name, part] : optim_parts(l)) {
      SlotMemory& m = *memory_.at(name);
      m.state_slabs = {layout_.block_slab(l)};
      m.part = part;
    }
    if (memory_.count(names::optim_spec(l)) != 0) {
      memory_.at(names::optim_spec(l))->state_slabs = {layout_.block_slab(l)};
    }
  }

  // The compute workspace is a slot too, so the device budget covers it.
  SlotMemory& ws = *memory_.at(names::kWorkspace);
  FloatCarver carver(ws.buf.f32());
  ws_ = carve_offload_workspace(carver, dims_, cfg_, block_elems_);

  if (extents.empty()) return Status::ok_status();
  if (cfg_.io.dirs.empty()) {
    return invalid_argument("io.dirs is empty but the offload placement puts state on storage");
  }
  STRATA_ASSIGN_OR_RETURN(engine_, create_configured_engine(cfg_.io, cfg_.io.dirs.front()));
  StoreOptions o;
  o.dirs = cfg_.io.dirs;
  o.stripe_unit = static_cast<uint64_t>(cfg_.io.stripe_unit);
  o.checksums = cfg_.io.checksums;
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

Status OffloadTrainer::run(BoundPlan& bp, bool iteration) {
  ExecutorOptions o;
  o.record_trace = record_trace_;
  auto report = execute_plan(bp.plan, gated_actions(bp), o);
  if (order_by_events_) {  // Note [Ordering by events]: the host reads nothing before this
    for (Stream* s : {compute_.get(), h2d_.get(), d2h_.get()}) s->synchronize();
  }
  if (!report.ok()) {
    // Note [Asynchronous checkpoints]: a snapshot being captured is not the state of any step.
    if (snapshot_) snapshot_->abandon(report.status());
    return report.status();
  }
  if (iteration) {
    last_report_ = std::move(*report);
    last_ = &bp;
  }
  return Status::ok_status();
}

int64_t OffloadTrainer::step_bytes_on(const BoundPlan& bp, Resource r) const {
  const int64_t repair = last_mode_ == StepMode::repaired
                             ? plan_for({.iteration = false, .repair = true}).traffic.on(r)
                             : 0;
  return bp.traffic.on(r) + repair;
}

Result<StepStats> OffloadTrainer::train_step(const int32_t* inputs, const int32_t* targets) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t BT = cfg_.batch_size * cfg_.seq_len;
  int32_t* tok = memory_.at(names::kTokensHost)->buf.i32();
  for (int64_t k = 0; k < cfg_.grad_accum; ++k) {
    std::memcpy(tok + k * 2 * BT, inputs + k * BT, static_cast<size_t>(BT * 4));
    std::memcpy(tok + k * 2 * BT + BT, targets + k * BT, static_cast<size_t>(BT * 4));
  }
  const bool defer = speculative_ && !policy_.speculate();
  const Pending pending_before = pending_;
  BoundPlan& bp = plan_for(iteration_key(defer));
  const auto run_t0 = std::chrono::steady_clock::now();
  Status st = run(bp);
  const double run_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run_t0).count();
  double repair_s = 0;
  if (st.ok() && speculative_ && !defer) st = settle_speculation(repair_s);
  if (!st.ok()) {
    return Status(st.code(), "step " + std::to_string(steps_done_) + ": " + st.message());
  }
  if (vertical_) {
    pending_ = bp.key.defer_part0            ? Pending::both
               : split_elems_ < block_elems_ ? Pending::part1
                                             : Pending::none;
  }
  if (speculative_) {
    const bool clipped = state_.skip || state_.grad_scale != 1.0f;
    last_mode_ = defer ? StepMode::waited : clipped ? StepMode::repaired : StepMode::speculated;
    const bool before = policy_.speculate();
    // Costs to weigh come from steady steps only: step 0 warms up (first touch of every
    // buffer), and a step that switches also does the other kind's part-0 work.
    const bool steady =
        steps_done_ > 0 && pending_before == (defer ? Pending::both : Pending::part1);
    policy_.record(clipped, !defer, steady ? run_s : 0.0, steps_done_ > 0 ? repair_s : 0.0);
    if (steps_done_ == 0 || policy_.speculate() != before) log_info(policy_.why());
  }

  StepStats s;
  s.step = steps_done_;
  double loss_sum = 0;  // as the in-memory trainer: per micro-batch in order, then the mean
  const float* losses = memory_.at(names::kLosses)->buf.f32();
  for (int64_t k = 0; k < cfg_.grad_accum; ++k) {
    double sum = 0;
    for (int64_t i = 0; i < BT; ++i) sum += losses[k * BT + i];
    loss_sum += sum / static_cast<double>(BT);
  }
  STRATA_RETURN_IF_ERROR(world_.all_reduce_sum(&loss_sum, 1));  // every rank's micro-batches
  s.loss = loss_sum / static_cast<double>(cfg_.grad_accum * cfg_.ranks);
  s.grad_norm = std::sqrt(last_norm_sumsq_);
  s.storage_read_bytes = step_bytes_on(bp, Resource::storage_read);
  s.storage_write_bytes = step_bytes_on(bp, Resource::storage_write);
  s.lr = state_.lr;
  s.skipped = state_.skip;
  if (s.skipped) {
    log_warn("step " + std::to_string(steps_done_) + ": non-finite gradient norm, update skipped");
  }
  steps_done_++;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

Status OffloadTrainer::finish() {
  if (pending_ == Pending::none) return Status::ok_status();
  // The flush is not a step: the last step's report (and trace) stays what last_report shows.
  Status st = run(plan_for({.pending = pending_, .iteration = false}), /*iteration=*/false);
  if (!st.ok()) return Status(st.code(), "final optimizer steps: " + st.message());
  pending_ = Pending::none;
  return Status::ok_status();
}

Status OffloadTrainer::settle_speculation(double& repair_s) {
  // Note [Speculative steps]: a finite norm that does not clip has clip factor exactly 1, which
  // is what part 0 assumed.
  if (state_.skip || state_.grad_scale != 1.0f) {
    // The repair is part of the step: the step's report (and trace) stays the iteration's.
    const auto t0 = std::chrono::steady_clock::now();
    Status st = run(plan_for({.iteration = false, .repair = true}), /*iteration=*/false);
    repair_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok())
      return Status(st.code(), "repairing the speculative optimizer steps: " + st.message());
  }
  adopt_speculative_state();
  return Status::ok_status();
}

void OffloadTrainer::adopt_speculative_state() {
  // Between runs nothing reads either slot; the names keep their roles and their state_slabs,
  // the memory behind them trades places.
  for (int64_t l = 0; l < cfg_.model.n_layer; ++l) {
    SlotMemory& store = *memory_.at(names::optim_store(l, 0));
    SlotMemory& spec = *memory_.at(names::optim_spec(l));
    std::swap(store.buf, spec.buf);
    std::swap(store.extent, spec.extent);
  }
}

const Plan& OffloadTrainer::last_plan() const {
  return last_ != nullptr ? last_->plan : plans_.front()->plan;
}

std::vector<std::string> OffloadTrainer::store_files() const {
  std::vector<std::string> files;
  if (!store_) return files;
  for (size_t d = 0; d < store_->dir_count(); ++d) files.push_back(store_->file(d).path);
  return files;
}

}  // namespace strata
