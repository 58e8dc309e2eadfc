#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "backend/cpu/kernels_adamw.h"
#include "core/dtype.h"
#include "core/rng.h"

namespace strata::test {

std::vector<float> random_floats(int64_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(static_cast<size_t>(n));
  Rng r(seed);
  for (auto& x : v) {
    double u = static_cast<double>(r.next_u64() >> 11) * (1.0 / 9007199254740992.0);
    x = static_cast<float>(lo + (hi - lo) * u);
  }
  return v;
}

std::vector<int32_t> random_ints(int64_t n, uint64_t seed, int32_t lo, int32_t hi) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  Rng r(seed);
  for (auto& x : v) x = lo + static_cast<int32_t>(r.next_u64() % static_cast<uint64_t>(hi - lo));
  return v;
}

double max_rel_error(const float* a, const float* b, int64_t n) {
  double max_diff = 0, max_ref = 0;
  for (int64_t i = 0; i < n; i++) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(b[i])));
  }
  if (max_ref == 0) return max_diff;
  return max_diff / max_ref;
}

double nmse(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den == 0 ? num : num / den;
}

namespace {
// STRATA_TEST_DEVICE: "cpu" (also when unset) or "cpu-discrete"; any other value aborts naming
// it, so a misspelt setting never passes on the wrong device.
std::string test_device_name() {
  const char* env = std::getenv("STRATA_TEST_DEVICE");
  const std::string want = env != nullptr ? env : "cpu";
  if (want != "cpu" && want != "cpu-discrete") {
    std::fprintf(stderr, "STRATA_TEST_DEVICE=%s: expected cpu or cpu-discrete\n", want.c_str());
    std::abort();
  }
  return want;
}
}  // namespace

std::string make_temp_dir(const std::string& name) {
  // A suite registered once per test device (tests/CMakeLists.txt) runs its copies side by side
  // under ctest -j: each device gets its own tree, or they would remove each other's files.
  std::filesystem::path p = std::filesystem::path(STRATA_BINARY_DIR) / "test_tmp";
  if (const std::string device = test_device_name(); device != "cpu") p /= device;
  p /= name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<Device> make_test_device(int64_t device_budget_bytes) {
  CpuDeviceOptions o;
  o.device_budget_bytes = device_budget_bytes;
  o.discrete = test_device_name() == "cpu-discrete";
  return create_cpu_device(o);
}

TrainConfig tiny_offload_config(const std::string& schedule, const std::string& store_dir) {
  TrainConfig c;
  c.model.vocab_size = 64;
  c.model.context_length = 16;
  c.model.n_layer = 3;
  c.model.n_head = 2;
  c.model.n_embd = 32;
  c.batch_size = 2;
  c.seq_len = 16;
  c.grad_accum = 3;
  c.schedule = named<Schedule>(schedule);
  c.offload.params_on_host = 0;
  c.offload.optim_on_host = 0;
  c.io.dirs = {store_dir};
  return c;
}

TaskKind kind_on(Resource r) {
  switch (r) {
    case Resource::compute:
      return TaskKind::block_forward;
    case Resource::h2d:
      return TaskKind::params_fetch;
    case Resource::d2h:
      return TaskKind::grad_out;
    case Resource::storage_read:
      return TaskKind::params_read;
    case Resource::storage_write:
      return TaskKind::params_write;
    case Resource::cpu_optim:
      return TaskKind::grad_norm;
    case Resource::net:
      return TaskKind::grad_allreduce;
  }
  return static_cast<TaskKind>(kTaskKindCount);  // no kind runs there
}

Task make_task(Resource r, std::string label, std::vector<int32_t> deps) {
  return Task{.kind = kind_on(r), .label = std::move(label), .deps = std::move(deps)};
}

// Asserted with GoogleTest: the error has the expected code, is one line, and names everything in
// `parts`.
void expect_error(const Status& s, ErrorCode code, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(s.ok()) << "expected an error containing " << *parts.begin();
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.to_string();
  for (const auto& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.to_string();
}

namespace {

constexpr int64_t kPageBytes = 4096;

// Host -> device, waited for.
void upload(Device& device, Stream& stream, Buffer& dst, const void* src, int64_t bytes) {
  device.copy(stream, dst.data(), src, bytes);
  stream.synchronize();
}

template <typename T>
std::vector<T> download(Device& device, Stream& stream, const Buffer& src, int64_t count) {
  std::vector<T> out(static_cast<size_t>(count));
  device.copy(stream, out.data(), src.data(), count * static_cast<int64_t>(sizeof(T)));
  stream.synchronize();
  return out;
}

OptionalSlotRun run_host_registration(Device& device, Stream& stream, bool call_default) {
  // Memory the caller allocated, as the storage engine's I/O buffers are.
  const int64_t n = kPageBytes / static_cast<int64_t>(sizeof(float));
  auto* mine = static_cast<float*>(std::aligned_alloc(kPageBytes, kPageBytes));
  if (mine == nullptr) return {Status(ErrorCode::out_of_memory, "aligned_alloc"), false};
  for (int64_t i = 0; i < n; i++) mine[i] = static_cast<float>(i);
  auto reg = [&] {
    return call_default ? device.Device::register_host_memory(mine, kPageBytes)
                        : device.register_host_memory(mine, kPageBytes);
  };
  auto unreg = [&] {
    return call_default ? device.Device::unregister_host_memory(mine)
                        : device.unregister_host_memory(mine);
  };
  OptionalSlotRun run;
  run.status = reg();
  if (!run.status.ok()) {
    // Both slots of the capability answer alike: nothing was registered, so nothing unregisters.
    const Status second = unreg();
    if (second.code() != run.status.code()) {
      run.status =
          Status(ErrorCode::internal, "register_host_memory said '" + run.status.to_string() +
                                          "', unregister_host_memory '" + second.to_string() + "'");
    }
    std::free(mine);
    return run;
  }
  auto dev = device.alloc(kPageBytes);
  if (dev.ok()) {
    upload(device, stream, dev.value(), mine, kPageBytes);
    const std::vector<float> back = download<float>(device, stream, dev.value(), n);
    run.took_effect = std::memcmp(back.data(), mine, kPageBytes) == 0;
  } else {
    run.status = dev.status();
  }
  const Status unregistered = unreg();
  if (run.status.ok()) run.status = unregistered;
  std::free(mine);
  return run;
}

OptionalSlotRun run_host_callbacks(Device& device, Stream& stream, bool call_default) {
  std::atomic<bool> ran{false};
  auto fn = [&ran] { ran = true; };
  OptionalSlotRun run;
  run.status = call_default ? device.Device::launch_host_func(stream, fn)
                            : device.launch_host_func(stream, fn);
  stream.synchronize();
  run.took_effect = ran.load();
  return run;
}

OptionalSlotRun run_bf16_matmul(Device& device, Stream& stream, bool call_default) {
  // out (2,3) = a (2,4) @ b (4,3), a all 1, b all 0.5: every element 2, exactly.
  const int64_t M = 2, N = 3, K = 4;
  const std::vector<bf16_t> a(M * K, f32_to_bf16(1.0f)), b(K * N, f32_to_bf16(0.5f));
  const std::vector<float> before(M * N, -1.0f);
  auto da = device.alloc(M * K * 2), db = device.alloc(K * N * 2), dout = device.alloc(M * N * 4);
  for (const auto* r : {&da, &db, &dout}) {
    if (!r->ok()) return {r->status(), false};
  }
  upload(device, stream, da.value(), a.data(), M * K * 2);
  upload(device, stream, db.value(), b.data(), K * N * 2);
  upload(device, stream, dout.value(), before.data(), M * N * 4);
  OptionalSlotRun run;
  const float* no_bias = nullptr;
  run.status = call_default ? device.Device::matmul_bf16(stream, dout->f32(), da->bf16(),
                                                         db->bf16(), no_bias, M, N, K, {})
                            : device.matmul_bf16(stream, dout->f32(), da->bf16(), db->bf16(),
                                                 no_bias, M, N, K, {});
  const std::vector<float> out = download<float>(device, stream, dout.value(), M * N);
  run.took_effect = true;
  for (float x : out) run.took_effect = run.took_effect && x == 2.0f;
  return run;
}

OptionalSlotRun run_device_adamw(Device& device, Stream& stream, bool call_default) {
  const int64_t n = 8;
  const std::vector<float> ones(n, 1.0f), zeros(n, 0.0f);
  auto param = device.alloc(n * 4), m = device.alloc(n * 4), v = device.alloc(n * 4),
       grad = device.alloc(n * 4);
  for (const auto* r : {&param, &m, &v, &grad}) {
    if (!r->ok()) return {r->status(), false};
  }
  upload(device, stream, param.value(), ones.data(), n * 4);
  upload(device, stream, m.value(), zeros.data(), n * 4);
  upload(device, stream, v.value(), zeros.data(), n * 4);
  upload(device, stream, grad.value(), ones.data(), n * 4);
  const AdamWHyper h{.lr = 0.1f, .weight_decay = 0.0f, .step = 1};
  OptionalSlotRun run;
  run.status = call_default ? device.Device::adamw_step(stream, param->f32(), m->f32(), v->f32(),
                                                        nullptr, grad->f32(), n, h)
                            : device.adamw_step(stream, param->f32(), m->f32(), v->f32(), nullptr,
                                                grad->f32(), n, h);
  const std::vector<float> after = download<float>(device, stream, param.value(), n);
  // Against the reference: bit-identical is the contract (Note [AdamW operation order]).
  std::vector<float> ref_param = ones, ref_m = zeros, ref_v = zeros;
  adamw_step_ref(ref_param.data(), ref_m.data(), ref_v.data(), nullptr, ones.data(), n, h);
  run.took_effect = std::memcmp(after.data(), ref_param.data(), n * 4) == 0;
  return run;
}

}  // namespace

OptionalSlotRun run_optional_slot(Device& device, Stream& stream, Capability c, bool call_default) {
  switch (c) {
    case Capability::host_registration:
      return run_host_registration(device, stream, call_default);
    case Capability::host_callbacks:
      return run_host_callbacks(device, stream, call_default);
    case Capability::bf16_matmul:
      return run_bf16_matmul(device, stream, call_default);
    case Capability::device_adamw:
      return run_device_adamw(device, stream, call_default);
  }
  return {Status(ErrorCode::internal, "unknown capability"), false};
}

::testing::AssertionResult is_unsupported(const Status& status, const Device& device,
                                          Capability c) {
  if (status.code() != ErrorCode::unavailable) {
    return ::testing::AssertionFailure() << "expected unavailable, got " << status.to_string();
  }
  const std::string& m = status.message();
  if (m.find(device.name()) == std::string::npos ||
      m.find(capability_name(c)) == std::string::npos || m.find('\n') != std::string::npos) {
    return ::testing::AssertionFailure()
           << "the message should be one line naming device '" << device.name()
           << "' and capability '" << capability_name(c) << "': " << m;
  }
  return ::testing::AssertionSuccess();
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what,
                  double tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_LE(max_rel_error(got.data(), want.data(), static_cast<int64_t>(got.size())), tol) << what;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t first = got.size();
  for (size_t i = 0; i < got.size() && first == got.size(); i++) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) first = i;
  }
  EXPECT_EQ(first, got.size()) << what << ": first difference at " << first << ": "
                               << (first < got.size() ? got[first] : 0.0f) << " vs "
                               << (first < got.size() ? want[first] : 0.0f);
}

}  // namespace strata::test
