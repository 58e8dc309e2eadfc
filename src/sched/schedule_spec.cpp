#include "sched/schedule_spec.h"

namespace strata {

void add_optimizer_step(SlotDepBuilder& b, int32_t l, const OptimizerStepSlots& s, int64_t O,
                        int64_t P) {
  int32_t state = s.state_store;
  if (s.state_stage >= 0) {
    state = s.state_stage;
    b.task(TaskKind::fetch, Resource::storage_read, "read.optim " + blk_tag(l), l, -1,
           {slot_read(s.state_store), slot_write(state)}, O);
  }
  const int32_t pout = s.params_stage >= 0 ? s.params_stage : s.params_store;
  b.task(TaskKind::optimizer, Resource::cpu_optim, "adamw " + blk_tag(l), l, -1,
         {slot_read(s.grad), slot_read(state), slot_write(state), slot_write(pout)});
  if (s.state_stage >= 0) {
    b.task(TaskKind::store, Resource::storage_write, "write.optim " + blk_tag(l), l, -1,
           {slot_read(state), slot_write(s.state_store)}, O);
  }
  if (s.params_stage >= 0) {
    b.task(TaskKind::store, Resource::storage_write, "write.params " + blk_tag(l), l, -1,
           {slot_read(pout), slot_write(s.params_store)}, P);
  }
}

}  // namespace strata
