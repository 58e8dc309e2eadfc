// Helpers shared by the tests: deterministic random fills and error measures.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "core/status.h"
#include "sched/plan.h"

namespace strata::test {

// Uniform in [lo, hi), from a fixed seed (splitmix64), so every run sees the same data.
std::vector<float> random_floats(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
std::vector<int32_t> random_ints(int64_t n, uint64_t seed, int32_t lo, int32_t hi);
// max |a-b| / max |b|  (0 when both are zero)
double max_rel_error(const float* a, const float* b, int64_t n);
// mse(a,b) / mse(b,0), ggml's NMSE
double nmse(const float* a, const float* b, int64_t n);
// Gtest expectations on two float vectors: max_rel_error within tol; every element's bits
// equal (naming the first that differs). `what` names the tensor in the failure message.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what,
                  double tol);
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const char* what);
// A 3-block GPT small enough for a test to train in milliseconds (vocab 64, T 16, C 32, B 2,
// M 3), on `schedule`, parameters and optimizer state on storage in `store_dir`.
// The value of a config enum by its config name ("vertical", "auto"); aborts the test binary on a
// name that does not exist (a typo in a test, not a runtime condition).
template <typename E>
E named(const std::string& name) {
  auto v = parse_enum<E>("test", name);
  if (!v.ok()) {
    std::fprintf(stderr, "%s\n", v.status().message().c_str());
    std::abort();
  }
  return *v;
}

TrainConfig tiny_offload_config(const std::string& schedule, const std::string& store_dir);

// The device the trainer suites run on: the CPU device, or the discrete CPU device (Note [The
// discrete CPU device] in backend/cpu/cpu_device.cpp) when the environment sets
// STRATA_TEST_DEVICE=cpu-discrete; tests/CMakeLists.txt runs the offloaded suites under both.
// Any other value aborts naming it, so a misspelt setting never passes on the wrong device.
std::unique_ptr<Device> make_test_device(int64_t device_budget_bytes = 0);

// A kind whose tasks run on `r` (Task::resource comes from the kind): a transfer, a block
// forward, the norm.
TaskKind kind_on(Resource r);
// A task on `r` of a kind that runs there (a transfer, a block forward, the norm), with `deps`:
// for tests of ordering and timing, where what the task does does not matter.
Task make_task(Resource r, std::string label, std::vector<int32_t> deps = {});

// The error has the expected code, is one line, and names everything in `parts`.
void expect_error(const Status& s, ErrorCode code, std::initializer_list<std::string> parts);
// A fresh empty directory under the build tree for one test.
std::string make_temp_dir(const std::string& name);
// The names in `dir`, sorted: to check that a writer left no temporary file beside its output.
std::vector<std::string> files_in(const std::string& dir);

// Note [Optional device capabilities] (backend/backend.h), exercised the same way on every
// backend. run_optional_slot calls capability c's slot(s) on `device` with small valid arguments
// on `stream`, waits for the stream, and looks at whether the work was done: the host function
// ran, the product or the AdamW step was written, memory copied through the registration. With
// call_default the call goes to Device's own default of the slot, bypassing the backend's
// override: what a backend without the slot runs.
struct OptionalSlotRun {
  Status status;             // the first non-ok Status of the calls, else ok
  bool took_effect = false;  // the work was observably done
};
OptionalSlotRun run_optional_slot(Device& device, Stream& stream, Capability c, bool call_default);
// Success when `status` is what a missing optional slot returns: unavailable, one line, naming
// the device and the capability.
::testing::AssertionResult is_unsupported(const Status& status, const Device& device, Capability c);

}  // namespace strata::test
