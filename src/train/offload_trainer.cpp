// The offloaded trainer's step loop: which plan runs, speculation and its repair, and the
// step's statistics; and its creation: plans, memory, actions, initial state.
#include "train/offload_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/format.h"
#include "core/log.h"
#include "core/targets.h"
#include "model/init.h"
#include "model/rope.h"
#include "sched/slot_names.h"
#include "train/offload_acts_policy.h"
#include "train/offload_plans.h"

namespace strata {

namespace names = slot_names;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

OffloadTrainer::OffloadTrainer(Device& dev, const TrainConfig& cfg, Communicator& world)
    : dev_(dev), world_(world), shape_(make_offload_shape(dev, cfg, world.rank(), world.size())) {
  streams_.compute = dev.create_stream("compute");
  streams_.h2d = dev.create_stream("h2d");
  streams_.d2h = dev.create_stream("d2h");
  state_ = std::make_unique<OffloadState>(dev, world, shape_, *streams_.h2d, *streams_.d2h);
  policy_ = SpeculationPolicy(cfg.optim.speculation);
}

OffloadTrainer::~OffloadTrainer() {
  // No stream work may outlive the buffers; the state then removes the store's files.
  for (Stream* s : {streams_.compute.get(), streams_.h2d.get(), streams_.d2h.get()}) {
    if (s != nullptr) s->synchronize();
  }
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
  const int64_t host_before = dev.memory_stats().host_in_use;
  std::unique_ptr<OffloadTrainer> t(new OffloadTrainer(dev, cfg, world));
  std::unique_ptr<DeviceCollectives> device_sum;
  if (device_transport && world.size() > 1) {  // before the plans: they depend on it
    device_sum = std::make_unique<DeviceCollectives>(dev, world, std::move(device_transport));
    t->streams_.net = dev.create_stream("net");
  }
  t->actions_ = std::make_unique<OffloadActions>(dev, world, t->shape_, *t->state_, t->streams_,
                                                 t->progress_, std::move(device_sum));
  STRATA_ASSIGN_OR_RETURN(t->rope_, upload_rope_table(dev, cfg.model, cfg.seq_len));
  t->shape_.dims.rope = t->rope_.f32();
  const std::vector<ActPolicy> acts_policy = decide_activation_policy(dev, t->shape_);
  const PlanSite site{.rank = world.rank(),
                      .device_collectives = t->actions_->device_sum() != nullptr,
                      .acts_policy = &acts_policy};
  std::vector<const Plan*> plans;
  for (const PlanKey& key : offload_plan_keys(t->shape_)) {
    t->plans_.push_back(std::make_unique<BoundPlan>());
    STRATA_RETURN_IF_ERROR(build_offload_plan(dev, t->shape_, site, key, *t->plans_.back()));
    plans.push_back(&t->plans_.back()->plan);
  }
  STRATA_RETURN_IF_ERROR(t->state_->allocate(plans));
  STRATA_RETURN_IF_ERROR(t->actions_->prepare());
  for (auto& bp : t->plans_) STRATA_RETURN_IF_ERROR(t->actions_->bind(*bp));
  STRATA_RETURN_IF_ERROR(t->state_->initialize());
  STRATA_RETURN_IF_ERROR(t->reserve_host_beside_plan(host_before));
  return t;
}

BoundPlan& OffloadTrainer::plan_for(const PlanKey& key) const {
  for (const auto& bp : plans_) {
    if (bp->key == key) return *bp;
  }
  STRATA_CHECK_MSG(false,
                   "no plan was built for this key: offload_plan_keys must hold every key a run "
                   "asks for");
  return *plans_.front();
}

Status OffloadTrainer::run(BoundPlan& bp, bool iteration) {
  ExecutorOptions o;
  o.record_trace = record_trace_;
  auto report = execute_plan(bp.plan, gated_actions(bp), o);
  if (actions_->orders_by_events()) {  // Note [Ordering by events]: the host reads nothing before
    for (Stream* s : {streams_.compute.get(), streams_.h2d.get(), streams_.d2h.get()}) {
      s->synchronize();
    }
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
  const int64_t BT = shape_.tokens_per_micro_batch();
  int32_t* tok = state_->slot(names::kTokensHost).buf.i32();  // (M, 2, B, T) inputs, targets
  for (int64_t k = 0; k < shape_.cfg.grad_accum; ++k) {
    std::memcpy(tok + k * 2 * BT, inputs + k * BT, static_cast<size_t>(BT * 4));
    std::memcpy(tok + k * 2 * BT + BT, targets + k * BT, static_cast<size_t>(BT * 4));
  }
  STRATA_ASSIGN_OR_RETURN(counted_,
                          step_counted_targets(world_, targets, BT * shape_.cfg.grad_accum));
  actions_->set_counted_targets(counted_);
  const bool defer = shape_.speculative && !policy_.speculate();
  const Pending pending_before = pending_;
  BoundPlan& bp = plan_for(iteration_key(shape_, pending_, defer));
  const auto run_t0 = std::chrono::steady_clock::now();
  Status st = run(bp);
  const double run_s = seconds_since(run_t0);
  double repair_s = 0;
  if (st.ok() && shape_.speculative && !defer) st = settle_speculation(repair_s);
  if (!st.ok()) {
    return Status(st.code(), "step " + std::to_string(progress_.steps_done) + ": " + st.message());
  }
  if (shape_.vertical) {
    pending_ = bp.key.defer_part0                        ? Pending::both
               : shape_.split_elems < shape_.block_elems ? Pending::part1
                                                         : Pending::none;
  }
  if (shape_.speculative) record_speculation(defer, pending_before, run_s, repair_s);
  STRATA_ASSIGN_OR_RETURN(StepStats s, step_stats(bp));
  progress_.steps_done++;
  s.seconds = seconds_since(t0);
  return s;
}

void OffloadTrainer::record_speculation(bool defer, Pending pending_before, double run_s,
                                        double repair_s) {
  const bool clipped = progress_.norm.skip || progress_.norm.grad_scale != 1.0f;
  last_mode_ = defer ? StepMode::waited : clipped ? StepMode::repaired : StepMode::speculated;
  const bool before = policy_.speculate();
  // Costs to weigh come from steady steps only: step 0 warms up (first touch of every
  // buffer), and a step that switches also does the other kind's part-0 work.
  const int64_t step = progress_.steps_done;
  const bool steady = step > 0 && pending_before == (defer ? Pending::both : Pending::part1);
  policy_.record(clipped, !defer, steady ? run_s : 0.0, step > 0 ? repair_s : 0.0);
  if (step == 0 || policy_.speculate() != before) log_info(policy_.why());
}

Result<StepStats> OffloadTrainer::step_stats(const BoundPlan& bp) {
  const int64_t BT = shape_.tokens_per_micro_batch(), M = shape_.cfg.grad_accum;
  StepStats s;
  s.step = progress_.steps_done;
  s.trained_tokens = counted_;
  double loss_sum = 0;  // as the in-memory trainer: per micro-batch in order, then the mean
  const float* losses = state_->slot(names::kLosses).buf.f32();  // (M, B, T)
  for (int64_t k = 0; k < M; ++k) {
    double sum = 0;
    for (int64_t i = 0; i < BT; ++i) sum += losses[k * BT + i];
    loss_sum += sum / static_cast<double>(BT);
  }
  STRATA_RETURN_IF_ERROR(world_.all_reduce_sum(&loss_sum, 1));  // every rank's micro-batches
  s.loss = counted_mean(loss_sum / static_cast<double>(M * shape_.cfg.ranks),
                        BT * M * shape_.cfg.ranks, counted_);
  s.grad_norm = std::sqrt(progress_.norm_sumsq);
  s.storage_read_bytes = step_bytes_on(bp, Resource::storage_read);
  s.storage_write_bytes = step_bytes_on(bp, Resource::storage_write);
  s.lr = progress_.norm.lr;
  s.skipped = progress_.norm.skip;
  if (s.skipped) {
    log_warn("step " + std::to_string(s.step) + ": non-finite gradient norm, update skipped");
  }
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
  if (progress_.norm.skip || progress_.norm.grad_scale != 1.0f) {
    // The repair is part of the step: the step's report (and trace) stays the iteration's.
    const auto t0 = std::chrono::steady_clock::now();
    Status st = run(plan_for({.iteration = false, .repair = true}), /*iteration=*/false);
    repair_s = seconds_since(t0);
    if (!st.ok())
      return Status(st.code(), "repairing the speculative optimizer steps: " + st.message());
  }
  state_->adopt_speculative_state();
  return Status::ok_status();
}

const Plan& OffloadTrainer::last_plan() const {
  return last_ != nullptr ? last_->plan : plans_.front()->plan;
}

}  // namespace strata
