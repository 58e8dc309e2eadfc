// A checkpoint's trainer_state.json, read by read_trainer_state: whatever it accepts must hold the
// bounds docs/design.md §11 states (step in [0, 2^53], adam_steps in [0, step], data_position
// >= 0, run ids of 16 hex digits), since the trainer uses them unchecked.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/config_bounds.h"
#include "fuzz_scratch.h"
#include "formats/checkpoint.h"

namespace {

bool is_run_id(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::write_scratch("trainer_state.json", data, size);
  auto meta = strata::read_trainer_state(strata::fuzz::scratch_dir());
  if (!meta.ok()) return 0;
  bool good = meta->step >= 0 && meta->step <= strata::kMaxSteps && meta->adam_steps >= 0 &&
              meta->adam_steps <= meta->step && meta->data_position >= 0 &&
              (meta->run_id.empty() || is_run_id(meta->run_id));
  for (const std::string& id : meta->lineage) good = good && is_run_id(id);
  if (!good) {
    std::fprintf(stderr, "read_trainer_state accepted a state out of bounds\n");
    std::abort();
  }
  return 0;
}
