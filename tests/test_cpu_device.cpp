// The CPU device behind the Device interface: stream order, events across streams, real
// concurrency between streams, the device-memory budget, ops through streams giving the same
// bits as the kernels called directly, and which optional slots it has (and the defaults').
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "test_util.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

// Spins until `flag` is set or `limit` passes; returns whether it was set.
bool wait_for_flag(const std::atomic<bool>& flag, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(CpuDevice, StreamRunsTasksInOrder) {
  auto dev = create_cpu_device();
  auto s = dev->create_stream("s");
  std::vector<int> order;
  for (int i = 0; i < 100; i++) {
    ASSERT_TRUE(dev->launch_host_func(*s, [&order, i] { order.push_back(i); }).ok());
  }
  s->synchronize();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; i++) EXPECT_EQ(order[static_cast<size_t>(i)], i);
}

TEST(CpuDevice, StreamsRunConcurrently) {
  // Stream a's task can only finish once stream b's task has run. Were the two streams
  // serialised on one thread, a's task would time out.
  auto dev = create_cpu_device();
  auto a = dev->create_stream("a");
  auto b = dev->create_stream("b");
  std::atomic<bool> released{false}, a_saw_release{false};
  ASSERT_TRUE(
      dev->launch_host_func(*a, [&] { a_saw_release = wait_for_flag(released, 5000ms); }).ok());
  ASSERT_TRUE(dev->launch_host_func(*b, [&] { released = true; }).ok());
  a->synchronize();
  b->synchronize();
  EXPECT_TRUE(a_saw_release.load());
}

TEST(CpuDevice, EventOrdersWorkAcrossStreams) {
  auto dev = create_cpu_device();
  auto producer = dev->create_stream("producer");
  auto consumer = dev->create_stream("consumer");
  auto ready = dev->create_event();
  std::atomic<bool> go{false};
  std::vector<float> src(1 << 16, 0.0f), dst(1 << 16, -1.0f);
  // The producer is held until the test releases it, so the consumer truly has to wait.
  ASSERT_TRUE(dev->launch_host_func(*producer, [&] { wait_for_flag(go, 5000ms); }).ok());
  ASSERT_TRUE(
      dev->launch_host_func(*producer, [&] { std::fill(src.begin(), src.end(), 7.0f); }).ok());
  ready->record(*producer);
  ready->wait(*consumer);
  dev->copy(*consumer, dst.data(), src.data(), static_cast<int64_t>(src.size() * 4));
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(ready->query()) << "event completed before the producer ran";
  go = true;
  consumer->synchronize();
  EXPECT_TRUE(ready->query());
  for (float x : dst) ASSERT_EQ(x, 7.0f);
}

TEST(CpuDevice, UnrecordedEventIsComplete) {
  auto dev = create_cpu_device();
  auto e = dev->create_event();
  EXPECT_TRUE(e->query());
  e->synchronize();  // must not block
}

TEST(CpuDevice, EventWaitKeepsTheGenerationItWasGiven) {
  // wait() captures the record() current at its call; a later re-record must not make the
  // waiting stream wait for the newer work.
  auto dev = create_cpu_device();
  auto a = dev->create_stream("a");
  auto b = dev->create_stream("b");
  auto e = dev->create_event();
  e->record(*a);
  e->wait(*b);
  std::atomic<bool> go{false};
  ASSERT_TRUE(dev->launch_host_func(*a, [&] { wait_for_flag(go, 5000ms); }).ok());
  e->record(*a);  // generation 2, blocked behind `go`
  std::atomic<bool> b_ran{false};
  ASSERT_TRUE(dev->launch_host_func(*b, [&] { b_ran = true; }).ok());
  EXPECT_TRUE(wait_for_flag(b_ran, 5000ms)) << "stream b waited for a later record";
  go = true;
  a->synchronize();
  b->synchronize();
}

TEST(CpuDevice, BudgetRefusesWithTheNumbersAndTracksPeak) {
  CpuDeviceOptions o;
  o.device_budget_bytes = 1 << 20;
  auto dev = create_cpu_device(o);
  auto first = dev->alloc(600 << 10);
  ASSERT_TRUE(first.ok());
  auto second = dev->alloc(600 << 10);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), ErrorCode::out_of_memory);
  EXPECT_NE(second.status().message().find("device budget"), std::string::npos)
      << second.status().message();
  EXPECT_EQ(dev->memory_stats().device_in_use, 600 << 10);
  first.value().reset();
  EXPECT_EQ(dev->memory_stats().device_in_use, 0);
  EXPECT_EQ(dev->memory_stats().device_peak, 600 << 10);
  EXPECT_EQ(dev->memory_stats().device_total, 0) << "the CPU device's memory is the host's";
  // Host buffers are not charged to the device budget.
  auto host = dev->alloc_host(4 << 20);
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(host.value().data()) % 4096, 0u);
  EXPECT_EQ(dev->memory_stats().host_in_use, 4 << 20);
}

TEST(CpuDevice, OpsThroughStreamsMatchDirectKernelCalls) {
  auto dev = create_cpu_device();
  auto s = dev->create_stream("compute");
  const int64_t B = 2, T = 33, C = 48, NH = 4, BT = B * T;
  const auto qkv = test::random_floats(BT * 3 * C, 1);
  const auto w = test::random_floats(C * 3 * C, 2);
  const auto bias = test::random_floats(3 * C, 3);
  const auto x = test::random_floats(BT * C, 4);
  const auto ln_w = test::random_floats(C, 5, 0.5f, 1.5f);

  std::vector<float> out_dev(BT * C), att_dev(B * NH * T * T), mm_dev(BT * 3 * C);
  std::vector<float> ln_dev(BT * C), mean_dev(BT), rstd_dev(BT);
  dev->attention_forward(*s, out_dev.data(), att_dev.data(), qkv.data(), B, T, C, NH);
  dev->matmul(*s, mm_dev.data(), x.data(), w.data(), bias.data(), BT, 3 * C, C, {.trans_b = true});
  dev->layernorm_forward(*s, ln_dev.data(), mean_dev.data(), rstd_dev.data(), x.data(), ln_w.data(),
                         bias.data(), BT, C);
  s->synchronize();

  std::vector<float> out(BT * C), att(B * NH * T * T), mm(BT * 3 * C), ln(BT * C), mean(BT),
      rstd(BT);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  cpu::matmul(mm.data(), x.data(), w.data(), bias.data(), BT, 3 * C, C, false, true, false);
  cpu::layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), ln_w.data(), bias.data(),
                         BT, C);
  EXPECT_EQ(std::memcmp(out.data(), out_dev.data(), out.size() * 4), 0);
  EXPECT_EQ(std::memcmp(att.data(), att_dev.data(), att.size() * 4), 0);
  EXPECT_EQ(std::memcmp(mm.data(), mm_dev.data(), mm.size() * 4), 0);
  EXPECT_EQ(std::memcmp(ln.data(), ln_dev.data(), ln.size() * 4), 0);
}

// The Llama ops and the embedding without positions through the device: the arguments reach
// the kernels in the order the interface gives them.
TEST(CpuDevice, LlamaOpsThroughStreamsMatchDirectKernelCalls) {
  auto dev = create_cpu_device();
  auto s = dev->create_stream("compute");
  const int64_t B = 2, T = 5, NH = 4, NKV = 2, hs = 6, BT = B * T, F = 11, V = 9;
  const int64_t C = NH * hs, row = (NH + 2 * NKV) * hs, wide = 3 * NH * hs;
  using test::random_floats;
  const auto x = random_floats(BT * C, 1), w = random_floats(C, 2, 0.5f, 1.5f);
  const auto qkv = random_floats(BT * row, 3), table = random_floats(T * hs, 4);
  const auto gu = random_floats(BT * 2 * F, 5, -4.0f, 4.0f), d_c = random_floats(BT * C, 6);
  const auto d_row = random_floats(BT * row, 7), d_f = random_floats(BT * F, 8);
  const auto d_wide = random_floats(BT * wide, 9), wte = random_floats(V * C, 10);
  const auto tokens = test::random_ints(BT, 11, 0, static_cast<int32_t>(V));
  using Floats = std::vector<float>;
  struct Outputs {
    Floats norm, rstd, dx, dw, roped, droped, act, dgu, rep, drep, emb, dwte;
  };
  auto prefilled = [](int64_t n, uint64_t seed) { return test::random_floats(n, seed); };
  // Outputs written fresh, gradients prefilled (the backward ops accumulate).
  auto fresh = [&] {
    return Outputs{.norm = Floats(BT * C),
                   .rstd = Floats(BT),
                   .dx = prefilled(BT * C, 20),
                   .dw = prefilled(C, 21),
                   .roped = Floats(BT * row),
                   .droped = prefilled(BT * row, 22),
                   .act = Floats(BT * F),
                   .dgu = prefilled(BT * 2 * F, 23),
                   .rep = Floats(BT * wide),
                   .drep = prefilled(BT * row, 24),
                   .emb = Floats(BT * C),
                   .dwte = prefilled(V * C, 25)};
  };
  Outputs got = fresh(), want = fresh();
  dev->rmsnorm_forward(*s, got.norm.data(), got.rstd.data(), x.data(), w.data(), BT, C, 1e-6f);
  dev->rmsnorm_backward(*s, got.dx.data(), got.dw.data(), d_c.data(), x.data(), w.data(),
                        got.rstd.data(), BT, C);
  dev->rope_forward(*s, got.roped.data(), qkv.data(), table.data(), B, T, row, NH + NKV, hs);
  dev->rope_backward(*s, got.droped.data(), d_row.data(), table.data(), B, T, row, NH + NKV, hs);
  dev->swiglu_forward(*s, got.act.data(), gu.data(), BT, F);
  dev->swiglu_backward(*s, got.dgu.data(), gu.data(), d_f.data(), BT, F);
  dev->repeat_kv_forward(*s, got.rep.data(), qkv.data(), B, T, NH, NKV, hs);
  dev->repeat_kv_backward(*s, got.drep.data(), d_wide.data(), B, T, NH, NKV, hs);
  dev->embedding_forward(*s, got.emb.data(), tokens.data(), wte.data(), nullptr, B, T, C);
  dev->embedding_backward(*s, got.dwte.data(), nullptr, d_c.data(), tokens.data(), B, T, C);
  s->synchronize();

  cpu::rmsnorm_forward(want.norm.data(), want.rstd.data(), x.data(), w.data(), BT, C, 1e-6f);
  cpu::rmsnorm_backward(want.dx.data(), want.dw.data(), d_c.data(), x.data(), w.data(),
                        want.rstd.data(), BT, C);
  cpu::rope_forward(want.roped.data(), qkv.data(), table.data(), B, T, row, NH + NKV, hs);
  cpu::rope_backward(want.droped.data(), d_row.data(), table.data(), B, T, row, NH + NKV, hs);
  cpu::swiglu_forward(want.act.data(), gu.data(), BT, F);
  cpu::swiglu_backward(want.dgu.data(), gu.data(), d_f.data(), BT, F);
  cpu::repeat_kv_forward(want.rep.data(), qkv.data(), B, T, NH, NKV, hs);
  cpu::repeat_kv_backward(want.drep.data(), d_wide.data(), B, T, NH, NKV, hs);
  cpu::embedding_forward(want.emb.data(), tokens.data(), wte.data(), nullptr, B, T, C);
  cpu::embedding_backward(want.dwte.data(), nullptr, d_c.data(), tokens.data(), B, T, C);

  auto same = [](const Floats& a, const Floats& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  EXPECT_TRUE(same(got.norm, want.norm)) << "rmsnorm out";
  EXPECT_TRUE(same(got.rstd, want.rstd)) << "rmsnorm rstd";
  EXPECT_TRUE(same(got.dx, want.dx)) << "rmsnorm dinp";
  EXPECT_TRUE(same(got.dw, want.dw)) << "rmsnorm dweight";
  EXPECT_TRUE(same(got.roped, want.roped)) << "rope out";
  EXPECT_TRUE(same(got.droped, want.droped)) << "rope dinp";
  EXPECT_TRUE(same(got.act, want.act)) << "swiglu out";
  EXPECT_TRUE(same(got.dgu, want.dgu)) << "swiglu dgu";
  EXPECT_TRUE(same(got.rep, want.rep)) << "repeat_kv out";
  EXPECT_TRUE(same(got.drep, want.drep)) << "repeat_kv dinp";
  EXPECT_TRUE(same(got.emb, want.emb)) << "embedding out";
  EXPECT_TRUE(same(got.dwte, want.dwte)) << "embedding dwte";
}

// attention_decode through the device: the arguments reach the kernel in the interface's order.
TEST(CpuDevice, AttentionDecodeThroughAStreamMatchesTheDirectKernelCall) {
  auto dev = create_cpu_device();
  auto s = dev->create_stream("compute");
  const int64_t T = 13, NH = 6, NKV = 3, hs = 10;
  const auto q = test::random_floats(NH * hs, 30);
  const auto kv = test::random_floats(T * 2 * NKV * hs, 31);
  std::vector<float> got(NH * hs), want(NH * hs), scratch_dev(NH * T), scratch(NH * T);
  dev->attention_decode(*s, got.data(), scratch_dev.data(), q.data(), kv.data(), T, NH, NKV, hs);
  s->synchronize();
  cpu::attention_decode(want.data(), scratch.data(), q.data(), kv.data(), T, NH, NKV, hs);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
}

// ---- optional slots (Note [Optional device capabilities])
// ----------------------------------------

// The CPU device implements host registration (a correct no-op: one memory), host callbacks (the
// stream's worker thread) and the bf16 GEMM (widened to f32); it leaves AdamW to the host.
bool cpu_implements(Capability c) {
  switch (c) {
    case Capability::host_registration:
    case Capability::host_callbacks:
    case Capability::bf16_matmul:
      return true;
    case Capability::device_adamw:
      return false;
  }
  return false;
}

TEST(CpuDevice, SupportsExactlyTheOptionalSlotsItImplements) {
  auto dev = create_cpu_device();
  auto s = dev->create_stream("s");
  for (int i = 0; i < kCapabilityCount; ++i) {
    const Capability c = static_cast<Capability>(i);
    SCOPED_TRACE(capability_name(c));
    EXPECT_EQ(dev->supports(c), cpu_implements(c));
    const test::OptionalSlotRun run = test::run_optional_slot(*dev, *s, c, false);
    if (cpu_implements(c)) {
      EXPECT_TRUE(run.status.ok()) << run.status.to_string();
      EXPECT_TRUE(run.took_effect) << "the slot said ok but its work was not done";
    } else {
      EXPECT_TRUE(test::is_unsupported(run.status, *dev, c));
      EXPECT_FALSE(run.took_effect) << "a missing slot must do nothing";
    }
  }
}

// Device's defaults, what a backend without a slot gets: every one is unavailable, names the
// device and the capability, and enqueues nothing (a host function is dropped unrun).
TEST(CpuDevice, DefaultOptionalSlotsReturnUnavailableNamingTheCapability) {
  auto dev = create_cpu_device();
  auto s = dev->create_stream("s");
  std::vector<std::string> names;
  for (int i = 0; i < kCapabilityCount; ++i) {
    const Capability c = static_cast<Capability>(i);
    SCOPED_TRACE(capability_name(c));
    names.push_back(capability_name(c));
    EXPECT_FALSE(dev->Device::supports(c));
    EXPECT_TRUE(test::is_unsupported(dev->unsupported(c), *dev, c));
    const test::OptionalSlotRun run = test::run_optional_slot(*dev, *s, c, true);
    EXPECT_TRUE(test::is_unsupported(run.status, *dev, c));
    EXPECT_FALSE(run.took_effect) << "a missing slot must do nothing";
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::unique(names.begin(), names.end()), names.end()) << "capability names repeat";
}

// ---- The discrete CPU device (Note [The discrete CPU device] in cpu/cpu_device.cpp) ----------

Buffer must(Result<Buffer> r) {
  if (!r.ok()) {
    ADD_FAILURE() << r.status().to_string();
    return Buffer();
  }
  return std::move(*r);
}

std::unique_ptr<Device> discrete_device() {
  CpuDeviceOptions o;
  o.discrete = true;
  return create_cpu_device(o);
}

TEST(CpuDiscreteDevice, NamesItselfAndImplementsEveryOptionalSlot) {
  auto dev = discrete_device();
  EXPECT_EQ(dev->kind(), DeviceKind::cpu_discrete);
  EXPECT_EQ(dev->name(), "cpu-discrete");
  auto s = dev->create_stream("s");
  for (int i = 0; i < kCapabilityCount; ++i) {
    const Capability c = static_cast<Capability>(i);
    SCOPED_TRACE(capability_name(c));
    EXPECT_TRUE(dev->supports(c));
    const test::OptionalSlotRun run = test::run_optional_slot(*dev, *s, c, false);
    EXPECT_TRUE(run.status.ok()) << run.status.to_string();
    EXPECT_TRUE(run.took_effect) << "the slot said ok but its work was not done";
  }
}

// Inputs reach the device by copy, the op runs on device memory, the result comes back by copy:
// the bits of the CPU device's op on the same values.
TEST(CpuDiscreteDevice, OpsOnDeviceMemoryGiveTheCpuDevicesBits) {
  const int64_t M = 17, N = 9, K = 33;
  const std::vector<float> a = test::random_floats(M * K, 1), b = test::random_floats(K * N, 2);
  auto product_on = [&](Device& dev) {
    auto s = dev.create_stream("s");
    Buffer da = must(dev.alloc(M * K * 4)), db = must(dev.alloc(K * N * 4)),
           dout = must(dev.alloc(M * N * 4));
    dev.copy(*s, da.data(), a.data(), M * K * 4);
    dev.copy(*s, db.data(), b.data(), K * N * 4);
    dev.matmul(*s, dout.f32(), da.f32(), db.f32(), nullptr, M, N, K, {});
    std::vector<float> out(static_cast<size_t>(M * N));
    dev.copy(*s, out.data(), dout.data(), M * N * 4);
    s->synchronize();
    return out;
  };
  auto cpu = create_cpu_device(), disc = discrete_device();
  test::expect_same_bits(product_on(*disc), product_on(*cpu), "matmul");
}

// What a GPU would fault on (or silently misread) is a checked bug here, at the call: an op
// given host memory, pinned or not, or device memory already freed. The plain CPU device
// accepts all of these (its memory is the host's): only the discrete one proves the rule.
TEST(CpuDiscreteDeathTest, AnOpGivenMemoryOutsideTheDeviceIsABug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto dev = discrete_device();
  auto s = dev->create_stream("s");
  Buffer device = must(dev->alloc(64 * 4)), pinned = must(dev->alloc_host(64 * 4));
  std::vector<float> heap(64, 1.0f);
  EXPECT_DEATH(dev->add(*s, device.f32(), device.f32(), heap.data(), 64),
               "cpu-discrete: add was given memory at .* that is no device allocation");
  EXPECT_DEATH(dev->fill_zero(*s, pinned.data(), 64 * 4),
               "cpu-discrete: fill_zero was given memory");
  float* stale = device.f32();
  device.reset();
  EXPECT_DEATH(dev->gelu_forward(*s, stale, stale, 64), "cpu-discrete: gelu_forward");
  // Interior pointers of a live allocation are device memory; copies may cross.
  Buffer live = must(dev->alloc(64 * 4));
  dev->copy(*s, live.data(), heap.data(), 64 * 4);
  dev->add(*s, live.f32() + 32, live.f32(), live.f32() + 16, 16);
  dev->copy(*s, heap.data(), live.data(), 64 * 4);
  s->synchronize();
  EXPECT_EQ(heap[32], 2.0f);
  auto cpu = create_cpu_device();
  auto cs = cpu->create_stream("s");
  cpu->add(*cs, heap.data(), heap.data(), heap.data(), 64);  // the CPU device: one memory
  cs->synchronize();
  EXPECT_EQ(heap[0], 2.0f);
}

}  // namespace
}  // namespace strata
