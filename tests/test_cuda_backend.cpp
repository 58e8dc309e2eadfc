// The CUDA device against the CPU device, op by op, on the same inputs (ggml's test-backend-ops
// idea): every op and its gradients within NMSE 1e-5 in f32 (bit for bit where both sides do the
// same operations in the same order: rope, repeat_kv, conversions, embedding without positions),
// the bf16 GEMM within the bound stated at its test, AdamW bit for bit against adamw_step_ref, plus
// streams, events, host memory, the memory pool, and the optional slots (Note [Optional device
// capabilities]).
//
// Written against backend.h only, so it builds with and without the CUDA backend. Where
// create_cuda_device fails (built without CUDA, no GPU, driver too old) every test skips and
// prints the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels_adamw.h"
#include "core/dtype.h"
#include "core/targets.h"
#include "dist/communicator.h"
#include "dist/device_collectives.h"
#include "dist/peer_transport.h"
#include "test_util.h"

namespace strata {
namespace {

using namespace std::chrono_literals;
using test::random_floats;
using test::random_ints;

constexpr double kF32Nmse = 1e-5;

// One tensor held twice, on the CPU device and on the CUDA device, with the same contents.
struct Twin {
  Buffer cpu, gpu;
  float* f32(bool on_gpu) const { return (on_gpu ? gpu : cpu).f32(); }
  int32_t* i32(bool on_gpu) const { return (on_gpu ? gpu : cpu).i32(); }
  bf16_t* bf16(bool on_gpu) const { return (on_gpu ? gpu : cpu).bf16(); }
};

class CudaBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto r = create_cuda_device();
    if (r.ok()) {
      cuda_ = std::move(r).value().release();
    } else {
      skip_reason_ = new std::string(r.status().to_string());
    }
  }
  static void TearDownTestSuite() {
    delete cuda_;  // before exit, while the CUDA runtime is still up
    cuda_ = nullptr;
    delete skip_reason_;
    skip_reason_ = nullptr;
  }

  void SetUp() override {
    if (cuda_ == nullptr) GTEST_SKIP() << "CUDA device unavailable: " << *skip_reason_;
    cpu_ = create_cpu_device();
    cpu_stream_ = cpu_->create_stream("cpu");
    gpu_stream_ = cuda_->create_stream("gpu");
  }
  void TearDown() override {
    if (gpu_stream_) gpu_stream_->synchronize();
    if (cpu_stream_) cpu_stream_->synchronize();
  }

  Device& gpu() { return *cuda_; }

  // A tensor of `bytes` on both devices, holding `init` (or zeros when init is null).
  Twin twin_bytes(const void* init, int64_t bytes) {
    Twin t{cpu_->alloc(bytes).value(), cuda_->alloc(bytes).value()};
    if (bytes == 0) return t;
    if (init != nullptr) {
      std::memcpy(t.cpu.data(), init, static_cast<size_t>(bytes));
      cuda_->copy(*gpu_stream_, t.gpu.data(), init, bytes);
    } else {
      std::memset(t.cpu.data(), 0, static_cast<size_t>(bytes));
      cuda_->fill_zero(*gpu_stream_, t.gpu.data(), bytes);
    }
    gpu_stream_->synchronize();
    return t;
  }
  Twin twin(const std::vector<float>& init) {
    return twin_bytes(init.data(), static_cast<int64_t>(init.size() * sizeof(float)));
  }
  Twin twin_i32(const std::vector<int32_t>& init) {
    return twin_bytes(init.data(), static_cast<int64_t>(init.size() * sizeof(int32_t)));
  }
  Twin zeros(int64_t n) { return twin_bytes(nullptr, n * static_cast<int64_t>(sizeof(float))); }

  // Runs op(device, stream, on_gpu) on both devices and waits for both.
  template <typename Op>
  void both(Op op) {
    op(*cpu_, *cpu_stream_, false);
    op(*cuda_, *gpu_stream_, true);
    cpu_stream_->synchronize();
    gpu_stream_->synchronize();
  }

  std::vector<float> download(const void* device_ptr, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    cuda_->copy(*gpu_stream_, v.data(), device_ptr, n * static_cast<int64_t>(sizeof(float)));
    gpu_stream_->synchronize();
    return v;
  }

  // NMSE of the CUDA result against the CPU one, over the first n floats.
  double nmse(const Twin& t, int64_t n) {
    const std::vector<float> g = download(t.gpu.data(), n);
    return test::nmse(g.data(), t.cpu.f32(), n);
  }

  // Whether the CUDA result has the CPU one's bits, over the first n floats.
  bool same_bits(const Twin& t, int64_t n) {
    const std::vector<float> g = download(t.gpu.data(), n);
    return std::memcmp(g.data(), t.cpu.data(), static_cast<size_t>(n) * sizeof(float)) == 0;
  }

  static inline Device* cuda_ = nullptr;
  static inline std::string* skip_reason_ = nullptr;
  std::unique_ptr<Device> cpu_;
  std::unique_ptr<Stream> cpu_stream_, gpu_stream_;
};

// ---- device, memory -----------------------------------------------------------------------------

TEST_F(CudaBackendTest, ReportsItself) {
  EXPECT_EQ(gpu().kind(), DeviceKind::cuda);
  EXPECT_EQ(gpu().name().rfind("cuda:0", 0), 0u) << gpu().name();
  std::printf("device: %s\n", gpu().name().c_str());
}

// Note [Optional device capabilities]: the CUDA device implements every optional slot, and each
// one does its work when called.
TEST_F(CudaBackendTest, SupportsEveryOptionalSlot) {
  for (int i = 0; i < kCapabilityCount; ++i) {
    const Capability c = static_cast<Capability>(i);
    SCOPED_TRACE(capability_name(c));
    EXPECT_TRUE(gpu().supports(c));
    const test::OptionalSlotRun run = test::run_optional_slot(gpu(), *gpu_stream_, c, false);
    EXPECT_TRUE(run.status.ok()) << run.status.to_string();
    EXPECT_TRUE(run.took_effect) << "the slot said ok but its work was not done";
  }
}

// Device's defaults on a CUDA device (what a backend without the slots would run): unavailable,
// naming this device and the capability, and nothing enqueued.
TEST_F(CudaBackendTest, DefaultOptionalSlotsReturnUnavailableNamingTheCapability) {
  for (int i = 0; i < kCapabilityCount; ++i) {
    const Capability c = static_cast<Capability>(i);
    SCOPED_TRACE(capability_name(c));
    EXPECT_FALSE(gpu().Device::supports(c));
    const test::OptionalSlotRun run = test::run_optional_slot(gpu(), *gpu_stream_, c, true);
    EXPECT_TRUE(test::is_unsupported(run.status, gpu(), c));
    EXPECT_FALSE(run.took_effect) << "a missing slot must do nothing";
  }
}

TEST_F(CudaBackendTest, PoolReusesFreedBlocks) {
  const int64_t before = gpu().memory_stats().device_in_use;
  void* first = nullptr;
  {
    Buffer b = gpu().alloc(3 << 20).value();
    first = b.data();
    EXPECT_EQ(b.bytes(), 3 << 20);
    EXPECT_GE(gpu().memory_stats().device_in_use, before + (3 << 20));
  }
  EXPECT_EQ(gpu().memory_stats().device_in_use, before);
  Buffer again = gpu().alloc(3 << 20).value();
  EXPECT_EQ(again.data(), first) << "a freed block of the same size class should be reused";
  Buffer small = gpu().alloc(100).value();
  EXPECT_EQ(small.bytes(), 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 256, 0u);
}

TEST_F(CudaBackendTest, BudgetRefusesWithNumbers) {
  auto dev = create_cuda_device(0, int64_t{64} << 20).value();
  EXPECT_EQ(dev->memory_stats().device_budget, int64_t{64} << 20);
  EXPECT_GT(dev->memory_stats().device_total, dev->memory_stats().device_budget)
      << "device_total is the GPU's own memory (totalGlobalMem), not the budget";
  Buffer a = dev->alloc(int64_t{48} << 20).value();
  auto refused = dev->alloc(int64_t{32} << 20);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::out_of_memory);
  EXPECT_NE(refused.status().message().find("budget"), std::string::npos)
      << refused.status().message();
  a.reset();
  Buffer b = dev->alloc(int64_t{32} << 20).value();  // fits once a is back (cache released)
  EXPECT_EQ(dev->memory_stats().device_peak, int64_t{48} << 20);
  dev->reset_peak_memory();
  EXPECT_EQ(dev->memory_stats().device_peak, int64_t{32} << 20);
}

TEST_F(CudaBackendTest, PinnedAndRegisteredHostMemory) {
  const int64_t host_before = gpu().memory_stats().host_in_use;
  Buffer pinned = gpu().alloc_host(10000).value();
  EXPECT_EQ(pinned.bytes(), 12288);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pinned.data()) % 4096, 0u);
  EXPECT_EQ(gpu().memory_stats().host_in_use, host_before + 12288);

  // Memory the storage engine would own: registered, copied from without a bounce, released.
  const int64_t n = 1 << 20;
  auto* mine = static_cast<float*>(std::aligned_alloc(4096, n * sizeof(float)));
  for (int64_t i = 0; i < n; i++) mine[i] = static_cast<float>(i);
  ASSERT_TRUE(gpu().register_host_memory(mine, n * sizeof(float)).ok());
  Buffer d = gpu().alloc(n * sizeof(float)).value();
  gpu().copy(*gpu_stream_, d.data(), mine, n * sizeof(float));
  gpu().copy(*gpu_stream_, pinned.data(), d.data(), 2048 * sizeof(float));
  gpu_stream_->synchronize();
  for (int64_t i = 0; i < 2048; i++) ASSERT_EQ(pinned.f32()[i], static_cast<float>(i));
  EXPECT_TRUE(gpu().unregister_host_memory(mine).ok());
  EXPECT_FALSE(gpu().unregister_host_memory(mine).ok()) << "second unregister must fail";
  std::free(mine);
}

// ---- streams, events ----------------------------------------------------------------------------

TEST_F(CudaBackendTest, HostFuncsRunInStreamOrder) {
  std::vector<int> order;
  for (int i = 0; i < 50; i++) {
    ASSERT_TRUE(gpu().launch_host_func(*gpu_stream_, [&order, i] { order.push_back(i); }).ok());
  }
  gpu_stream_->synchronize();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; i++) EXPECT_EQ(order[static_cast<size_t>(i)], i);
}

TEST_F(CudaBackendTest, EventOrdersWorkAcrossStreams) {
  auto producer = gpu().create_stream("producer");
  auto consumer = gpu().create_stream("consumer");
  auto ready = gpu().create_event();
  EXPECT_TRUE(ready->query()) << "an event never recorded counts as complete";
  const int64_t n = 1 << 22;  // 16 MiB
  Buffer src = gpu().alloc_host(n * 4).value(), dst = gpu().alloc_host(n * 4).value();
  Buffer mid = gpu().alloc(n * 4).value();
  std::fill(src.f32(), src.f32() + n, 7.0f);
  std::fill(dst.f32(), dst.f32() + n, -1.0f);
  std::atomic<bool> go{false};
  // The producer is held by a host function until the test releases it, so the consumer really
  // has to wait for the event.
  ASSERT_TRUE(gpu()
                  .launch_host_func(*producer,
                                    [&] {
                                      const auto deadline = std::chrono::steady_clock::now() + 5s;
                                      while (!go.load() &&
                                             std::chrono::steady_clock::now() < deadline) {
                                        std::this_thread::yield();
                                      }
                                    })
                  .ok());
  gpu().copy(*producer, mid.data(), src.data(), n * 4);
  ready->record(*producer);
  ready->wait(*consumer);
  gpu().copy(*consumer, dst.data(), mid.data(), n * 4);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(ready->query()) << "event completed before the producer ran";
  go = true;
  consumer->synchronize();
  EXPECT_TRUE(ready->query());
  for (int64_t i = 0; i < n; i++) ASSERT_EQ(dst.f32()[i], 7.0f) << i;
}

// ---- GEMMs --------------------------------------------------------------------------------------

struct GemmCase {
  int64_t M, N, K;
  bool trans_a, trans_b, bias, accumulate;
};

// "M64_N96_K128_tb_bias": names for CTest, and for gtest's messages through PrintTo. (snprintf:
// GCC 12 warns falsely, -Wrestrict, on "M" + std::to_string(...).)
std::string gemm_case_name(const GemmCase& c) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "M%lld_N%lld_K%lld%s%s%s%s", static_cast<long long>(c.M),
                static_cast<long long>(c.N), static_cast<long long>(c.K), c.trans_a ? "_ta" : "",
                c.trans_b ? "_tb" : "", c.bias ? "_bias" : "", c.accumulate ? "_acc" : "");
  return buf;
}
void PrintTo(const GemmCase& c, std::ostream* os) {
  *os << gemm_case_name(c);
}

class CudaGemmTest : public CudaBackendTest, public ::testing::WithParamInterface<GemmCase> {};

TEST_P(CudaGemmTest, F32MatchesCpu) {
  const auto [M, N, K, ta, tb, with_bias, acc] = GetParam();
  Twin a = twin(random_floats(M * K, 1)), b = twin(random_floats(K * N, 2));
  Twin bias = twin(random_floats(N, 3)), out = twin(random_floats(M * N, 4));
  both([&](Device& d, Stream& s, bool g) {
    d.matmul(s, out.f32(g), a.f32(g), b.f32(g), with_bias ? bias.f32(g) : nullptr, M, N, K,
             {.trans_a = ta, .trans_b = tb, .accumulate = acc});
  });
  EXPECT_LE(nmse(out, M * N), kF32Nmse);
}

// bf16 inputs: every product of two bf16 values is exact in f32 and the tensor cores accumulate
// in f32, so against the CPU's f32 GEMM of the same bf16 values only the order of the sums
// differs, as in f32. The bound is the f32 one.
TEST_P(CudaGemmTest, Bf16MatchesCpuOnTheSameBf16Values) {
  const auto [M, N, K, ta, tb, with_bias, acc] = GetParam();
  auto to_bf16 = [](const std::vector<float>& v) {
    std::vector<bf16_t> h(v.size());
    for (size_t i = 0; i < v.size(); i++) h[i] = f32_to_bf16(v[i]);
    return h;
  };
  const auto ha = to_bf16(random_floats(M * K, 5)), hb = to_bf16(random_floats(K * N, 6));
  Twin a = twin_bytes(ha.data(), M * K * 2), b = twin_bytes(hb.data(), K * N * 2);
  Twin bias = twin(random_floats(N, 7)), out = twin(random_floats(M * N, 8));
  both([&](Device& d, Stream& s, bool g) {
    EXPECT_TRUE(d.matmul_bf16(s, out.f32(g), a.bf16(g), b.bf16(g),
                              with_bias ? bias.f32(g) : nullptr, M, N, K,
                              {.trans_a = ta, .trans_b = tb, .accumulate = acc})
                    .ok())
        << d.name();
  });
  EXPECT_LE(nmse(out, M * N), kF32Nmse);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaGemmTest,
    ::testing::Values(GemmCase{64, 96, 128, false, true, true, false},   // linear forward
                      GemmCase{64, 128, 96, false, false, false, true},  // dinp += dout @ W
                      GemmCase{96, 128, 64, true, false, false, true},   // dW += dout^T @ inp
                      GemmCase{33, 47, 29, true, true, true, true},      // odd sizes, all flags
                      GemmCase{257, 768, 768, false, true, true, false},
                      GemmCase{1, 5, 3, false, false, true, false},
                      GemmCase{16, 24, 0, false, true, true, true}),  // K = 0: out += bias
    [](const auto& info) { return gemm_case_name(info.param); });

TEST_F(CudaBackendTest, BiasBackward) {
  for (auto [M, N] : {std::pair<int64_t, int64_t>{300, 77}, {4096, 768}}) {
    Twin dout = twin(random_floats(M * N, 9)), dbias = twin(random_floats(N, 10));
    both(
        [&](Device& d, Stream& s, bool g) { d.bias_backward(s, dbias.f32(g), dout.f32(g), M, N); });
    EXPECT_LE(nmse(dbias, N), kF32Nmse) << M << "x" << N;
  }
}

// ---- the other ops
// --------------------------------------------------------------------------------

TEST_F(CudaBackendTest, LayerNormForwardAndBackward) {
  const int64_t N = 130, C = 768;
  Twin inp = twin(random_floats(N * C, 11, -2, 2)), w = twin(random_floats(C, 12));
  Twin b = twin(random_floats(C, 13)), out = zeros(N * C), mean = zeros(N), rstd = zeros(N);
  both([&](Device& d, Stream& s, bool g) {
    d.layernorm_forward(s, out.f32(g), mean.f32(g), rstd.f32(g), inp.f32(g), w.f32(g), b.f32(g), N,
                        C);
  });
  EXPECT_LE(nmse(out, N * C), kF32Nmse);
  EXPECT_LE(nmse(mean, N), kF32Nmse);
  EXPECT_LE(nmse(rstd, N), kF32Nmse);
  // Backward accumulates (Note [Backward accumulates]): start from non-zero gradients.
  Twin dout = twin(random_floats(N * C, 14)), dinp = twin(random_floats(N * C, 15));
  Twin dw = twin(random_floats(C, 16)), db = twin(random_floats(C, 17));
  both([&](Device& d, Stream& s, bool g) {
    d.layernorm_backward(s, dinp.f32(g), dw.f32(g), db.f32(g), dout.f32(g), inp.f32(g), w.f32(g),
                         mean.f32(g), rstd.f32(g), N, C);
  });
  EXPECT_LE(nmse(dinp, N * C), kF32Nmse);
  EXPECT_LE(nmse(dw, C), kF32Nmse);
  EXPECT_LE(nmse(db, C), kF32Nmse);
}

TEST_F(CudaBackendTest, GeluForwardAndBackward) {
  const int64_t n = 100003;
  Twin inp = twin(random_floats(n, 18, -5, 5)), out = zeros(n);
  Twin dout = twin(random_floats(n, 19)), dinp = twin(random_floats(n, 20));
  both([&](Device& d, Stream& s, bool g) {
    d.gelu_forward(s, out.f32(g), inp.f32(g), n);
    d.gelu_backward(s, dinp.f32(g), inp.f32(g), dout.f32(g), n);
  });
  EXPECT_LE(nmse(out, n), kF32Nmse);
  EXPECT_LE(nmse(dinp, n), kF32Nmse);
}

struct AttentionCase {
  int64_t B, T, C, NH;
};

std::string attention_case_name(const AttentionCase& c) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "B%lld_T%lld_C%lld_NH%lld", static_cast<long long>(c.B),
                static_cast<long long>(c.T), static_cast<long long>(c.C),
                static_cast<long long>(c.NH));
  return buf;
}
void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << attention_case_name(c);
}

class CudaAttentionTest : public CudaBackendTest,
                          public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(CudaAttentionTest, ForwardAndBackwardMatchCpu) {
  const auto [B, T, C, NH] = GetParam();
  Twin qkv = twin(random_floats(B * T * 3 * C, 21)), out = zeros(B * T * C);
  Twin dout = twin(random_floats(B * T * C, 22)), dqkv = twin(random_floats(B * T * 3 * C, 23));
  // Saved state and scratch are the backend's own business, and differ in size.
  Twin att{cpu_->alloc(cpu_->attention_saved_floats(B, T, NH) * 4).value(),
           gpu().alloc(gpu().attention_saved_floats(B, T, NH) * 4).value()};
  Twin scratch{cpu_->alloc(cpu_->attention_scratch_floats(B, T, NH) * 4).value(),
               gpu().alloc(gpu().attention_scratch_floats(B, T, NH) * 4).value()};
  EXPECT_LT(gpu().attention_saved_floats(B, T, NH), B * NH * T * T) << "fused: no T x T state";
  both([&](Device& d, Stream& s, bool g) {
    d.attention_forward(s, out.f32(g), att.f32(g), qkv.f32(g), B, T, C, NH);
    d.attention_backward(s, dqkv.f32(g), scratch.f32(g), dout.f32(g), qkv.f32(g), att.f32(g), B, T,
                         C, NH);
  });
  EXPECT_LE(nmse(out, B * T * C), kF32Nmse);
  EXPECT_LE(nmse(dqkv, B * T * 3 * C), kF32Nmse);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTest,
                         ::testing::Values(AttentionCase{2, 64, 128, 2},    // hs 64
                                           AttentionCase{1, 200, 768, 12},  // GPT-2 heads, T odd
                                           AttentionCase{2, 37, 96, 4},     // hs 24 (padded)
                                           AttentionCase{1, 130, 256, 2}),  // hs 128
                         [](const auto& info) { return attention_case_name(info.param); });

TEST_F(CudaBackendTest, SoftmaxCrossEntropy) {
  for (auto [N, V] : {std::pair<int64_t, int64_t>{64, 256}, {8, 50257}}) {
    std::vector<int32_t> t = random_ints(N, 25, 0, V);
    t[1] = t[N - 2] = kIgnoreTarget;  // Note [Ignored targets]: loss 0, the dlogits row unchanged
    Twin logits = twin(random_floats(N * V, 24, -4, 4)), targets = twin_i32(t);
    Twin losses = zeros(N), probs = zeros(N * V), dlogits = twin(random_floats(N * V, 26));
    both([&](Device& d, Stream& s, bool g) {
      d.softmax_cross_entropy_forward(s, losses.f32(g), probs.f32(g), logits.f32(g), targets.i32(g),
                                      N, V);
      d.softmax_cross_entropy_backward(s, dlogits.f32(g), probs.f32(g), targets.i32(g),
                                       1.0f / static_cast<float>(N), N, V);
    });
    EXPECT_LE(nmse(losses, N), kF32Nmse) << "V=" << V;
    EXPECT_LE(nmse(probs, N * V), kF32Nmse) << "V=" << V;
    EXPECT_LE(nmse(dlogits, N * V), kF32Nmse) << "V=" << V;
  }
}

TEST_F(CudaBackendTest, EmbeddingForwardAndBackward) {
  const int64_t V = 50, maxT = 64, B = 3, T = 40, C = 96;
  Twin tokens = twin_i32(random_ints(B * T, 27, 0, V));  // repeats: rows summed in the backward
  Twin wte = twin(random_floats(V * C, 28)), wpe = twin(random_floats(maxT * C, 29));
  Twin out = zeros(B * T * C), dout = twin(random_floats(B * T * C, 30));
  Twin dwte = twin(random_floats(V * C, 31)), dwpe = twin(random_floats(maxT * C, 32));
  both([&](Device& d, Stream& s, bool g) {
    d.embedding_forward(s, out.f32(g), tokens.i32(g), wte.f32(g), wpe.f32(g), B, T, C);
    d.embedding_backward(s, dwte.f32(g), dwpe.f32(g), dout.f32(g), tokens.i32(g), B, T, C);
  });
  EXPECT_LE(nmse(out, B * T * C), kF32Nmse);
  EXPECT_LE(nmse(dwte, V * C), kF32Nmse);
  EXPECT_LE(nmse(dwpe, maxT * C), kF32Nmse);
}

// Llama: no position table; a copy and token-order sums on both sides, so the same bits.
TEST_F(CudaBackendTest, EmbeddingWithoutPositionsIsBitExact) {
  const int64_t V = 50, B = 3, T = 40, C = 96;
  Twin tokens = twin_i32(random_ints(B * T, 27, 0, V));
  Twin wte = twin(random_floats(V * C, 28)), out = zeros(B * T * C);
  Twin dout = twin(random_floats(B * T * C, 30)), dwte = twin(random_floats(V * C, 31));
  both([&](Device& d, Stream& s, bool g) {
    d.embedding_forward(s, out.f32(g), tokens.i32(g), wte.f32(g), nullptr, B, T, C);
    d.embedding_backward(s, dwte.f32(g), nullptr, dout.f32(g), tokens.i32(g), B, T, C);
  });
  EXPECT_TRUE(same_bits(out, B * T * C)) << "out";
  EXPECT_TRUE(same_bits(dwte, V * C)) << "dwte";
}

// ---- Llama ops ----------------------------------------------------------------------------------

// Sums in another order than the CPU's index order (a warp per row, a column-tile reduction for
// dweight): within NMSE 1e-5 like layernorm. C = 4096 as Llama 7B, and an odd C.
TEST_F(CudaBackendTest, RmsNormForwardAndBackward) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{130, 4096}, {37, 1001}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C);
    Twin inp = twin(random_floats(N * C, 40, -2, 2)), w = twin(random_floats(C, 41, 0.5f, 1.5f));
    Twin out = zeros(N * C), rstd = zeros(N);
    both([&](Device& d, Stream& s, bool g) {
      d.rmsnorm_forward(s, out.f32(g), rstd.f32(g), inp.f32(g), w.f32(g), N, C, 1e-5f);
    });
    EXPECT_LE(nmse(out, N * C), kF32Nmse);
    EXPECT_LE(nmse(rstd, N), kF32Nmse);
    // Backward accumulates: non-zero prefills. Both read the CPU's rstd, so only the backward
    // itself is compared.
    Twin rstd_cpu = twin(std::vector<float>(rstd.cpu.f32(), rstd.cpu.f32() + N));
    Twin dout = twin(random_floats(N * C, 42)), dinp = twin(random_floats(N * C, 43));
    Twin dw = twin(random_floats(C, 44));
    both([&](Device& d, Stream& s, bool g) {
      d.rmsnorm_backward(s, dinp.f32(g), dw.f32(g), dout.f32(g), inp.f32(g), w.f32(g),
                         rstd_cpu.f32(g), N, C);
    });
    EXPECT_LE(nmse(dinp, N * C), kF32Nmse);
    EXPECT_LE(nmse(dw, C), kF32Nmse);
  }
}

// Every product and sum rounded on its own on both sides (no fma): the same bits. q and k heads
// rotated, v copied; T = 1 too; and in place.
TEST_F(CudaBackendTest, RopeIsBitExact) {
  struct Case {
    int64_t B, T, NH, NKV, hs;
  };
  for (Case c : {Case{2, 37, 8, 2, 64}, Case{1, 1, 4, 4, 128}, Case{3, 9, 6, 3, 10}}) {
    SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " hs=" << c.hs);
    const int64_t row = (c.NH + 2 * c.NKV) * c.hs, n = c.B * c.T * row, n_rot = c.NH + c.NKV;
    std::vector<float> table(static_cast<size_t>(c.T * c.hs));
    for (int64_t t = 0; t < c.T; t++) {
      for (int64_t i = 0; i < c.hs / 2; i++) {
        const double angle = static_cast<double>(t) * std::pow(10000.0, -2.0 * i / c.hs);
        table[(t * c.hs / 2 + i) * 2] = static_cast<float>(std::cos(angle));
        table[(t * c.hs / 2 + i) * 2 + 1] = static_cast<float>(std::sin(angle));
      }
    }
    Twin rope = twin(table), inp = twin(random_floats(n, 45)), out = zeros(n);
    Twin dout = twin(random_floats(n, 46)), dinp = twin(random_floats(n, 47));
    Twin in_place = twin(random_floats(n, 45));
    both([&](Device& d, Stream& s, bool g) {
      d.rope_forward(s, out.f32(g), inp.f32(g), rope.f32(g), c.B, c.T, row, n_rot, c.hs);
      d.rope_forward(s, in_place.f32(g), in_place.f32(g), rope.f32(g), c.B, c.T, row, n_rot, c.hs);
      d.rope_backward(s, dinp.f32(g), dout.f32(g), rope.f32(g), c.B, c.T, row, n_rot, c.hs);
    });
    EXPECT_TRUE(same_bits(out, n)) << "out";
    EXPECT_TRUE(same_bits(in_place, n)) << "out in place";
    EXPECT_TRUE(same_bits(dinp, n)) << "dinp";
  }
}

// expf (CUDA, 2 ulp) against the CPU's exp_fast: within NMSE 1e-5.
TEST_F(CudaBackendTest, SwigluForwardAndBackward) {
  const int64_t N = 130, F = 1001;
  Twin gu = twin(random_floats(N * 2 * F, 48, -10, 10)), out = zeros(N * F);
  Twin dout = twin(random_floats(N * F, 49)), dgu = twin(random_floats(N * 2 * F, 50));
  both([&](Device& d, Stream& s, bool g) {
    d.swiglu_forward(s, out.f32(g), gu.f32(g), N, F);
    d.swiglu_backward(s, dgu.f32(g), gu.f32(g), dout.f32(g), N, F);
  });
  EXPECT_LE(nmse(out, N * F), kF32Nmse);
  EXPECT_LE(nmse(dgu, N * 2 * F), kF32Nmse);
}

// Copies, and sums of the repeats from 0 in repeat order on both sides: the same bits. NKV = NH,
// NKV = 1, NH/NKV = 2 and 4.
TEST_F(CudaBackendTest, RepeatKvIsBitExact) {
  for (auto [NH, NKV] : {std::pair<int64_t, int64_t>{8, 8}, {8, 1}, {8, 4}, {8, 2}}) {
    SCOPED_TRACE(testing::Message() << "NH=" << NH << " NKV=" << NKV);
    const int64_t B = 2, T = 33, hs = 64;
    const int64_t in_n = B * T * (NH + 2 * NKV) * hs, out_n = B * T * 3 * NH * hs;
    Twin inp = twin(random_floats(in_n, 51)), out = zeros(out_n);
    Twin dout = twin(random_floats(out_n, 52)), dinp = twin(random_floats(in_n, 53));
    both([&](Device& d, Stream& s, bool g) {
      d.repeat_kv_forward(s, out.f32(g), inp.f32(g), B, T, NH, NKV, hs);
      d.repeat_kv_backward(s, dinp.f32(g), dout.f32(g), B, T, NH, NKV, hs);
    });
    EXPECT_TRUE(same_bits(out, out_n)) << "out";
    EXPECT_TRUE(same_bits(dinp, in_n)) << "dinp";
  }
}

// KV-cached attention of one query. The scores and exponentials are the CPU's bits, the row sum
// goes in another fixed order (Note [Decode attention on CUDA]), so the two agree to rounding.
// Odd head sizes and one above the fused forward's 128, NH/NKV = 1, 2, 4, several key tiles;
// out and scratch start as NaN on both sides.
TEST_F(CudaBackendTest, AttentionDecodeMatchesCpu) {
  struct Case {
    int64_t T, NH, NKV, hs;
  };
  for (Case c : {Case{1, 4, 4, 64}, Case{7, 8, 2, 33}, Case{300, 8, 2, 64}, Case{1000, 32, 8, 128},
                 Case{129, 4, 1, 200}, Case{2050, 12, 12, 5}}) {
    const auto [T, NH, NKV, hs] = c;
    SCOPED_TRACE(testing::Message() << "T=" << T << " NH=" << NH << " NKV=" << NKV << " hs=" << hs);
    Twin q = twin(random_floats(NH * hs, 61, -2.0f, 2.0f));
    Twin kv = twin(random_floats(T * 2 * NKV * hs, 62, -2.0f, 2.0f));
    Twin out = twin(std::vector<float>(NH * hs, NAN));
    Twin scratch = twin(std::vector<float>(NH * T, NAN));
    both([&](Device& d, Stream& s, bool g) {
      d.attention_decode(s, out.f32(g), scratch.f32(g), q.f32(g), kv.f32(g), T, NH, NKV, hs);
    });
    EXPECT_LE(nmse(out, NH * hs), kF32Nmse);
    const std::vector<float> g = download(out.gpu.data(), NH * hs);
    EXPECT_LE(test::max_rel_error(g.data(), out.cpu.f32(), NH * hs), 1e-5);
  }
}

// On the GPU alone: decoding the newest position gives the fused causal forward's last row, to
// rounding (the forward's online softmax sums in tiles of 32 keys).
TEST_F(CudaBackendTest, AttentionDecodeMatchesTheFusedForwardsLastRow) {
  for (auto [T, C, NH] :
       {std::tuple<int64_t, int64_t, int64_t>{200, 768, 12}, {37, 96, 4}, {130, 256, 2}}) {
    SCOPED_TRACE(testing::Message() << "T=" << T << " C=" << C << " NH=" << NH);
    const int64_t hs = C / NH;
    const std::vector<float> qkv = random_floats(T * 3 * C, 63, -2.0f, 2.0f);  // (T,3C)
    std::vector<float> kv(T * 2 * C);  // (T,2C): the k | v part of each row
    for (int64_t t = 0; t < T; t++) {
      std::memcpy(kv.data() + t * 2 * C, qkv.data() + t * 3 * C + C, 2 * C * sizeof(float));
    }
    Twin qkv_t = twin(qkv), kv_t = twin(kv), out = zeros(T * C), dec = zeros(C);
    Twin scratch = zeros(NH * T);
    Buffer att = gpu().alloc(gpu().attention_saved_floats(1, T, NH) * 4).value();
    gpu().attention_forward(*gpu_stream_, out.f32(true), att.f32(), qkv_t.f32(true), 1, T, C, NH);
    gpu().attention_decode(*gpu_stream_, dec.f32(true), scratch.f32(true),
                           qkv_t.f32(true) + (T - 1) * 3 * C, kv_t.f32(true), T, NH, NH, hs);
    const std::vector<float> fwd = download(out.gpu.data(), T * C);
    const std::vector<float> got = download(dec.gpu.data(), C);
    EXPECT_LE(test::nmse(got.data(), fwd.data() + (T - 1) * C, C), kF32Nmse);
  }
}

TEST_F(CudaBackendTest, ResidualAndScaledAdd) {
  const int64_t n = 70001;
  Twin a = twin(random_floats(n, 33)), b = twin(random_floats(n, 34)), out = zeros(n);
  both([&](Device& d, Stream& s, bool g) {
    d.add(s, out.f32(g), a.f32(g), b.f32(g), n);
    d.scaled_add(s, a.f32(g), b.f32(g), -0.37f, n);
  });
  EXPECT_LE(nmse(out, n), kF32Nmse);
  EXPECT_LE(nmse(a, n), kF32Nmse);
}

TEST_F(CudaBackendTest, ScaledCopy2dIsBitExact) {
  const int64_t rows = 301, cols = 67, ldx = 80, ldy = 131;
  Twin x = twin(random_floats(rows * ldx, 36)), y = twin(random_floats(rows * ldy, 37));
  both([&](Device& d, Stream& s, bool g) {
    d.scaled_copy_2d(s, y.f32(g) + 5, ldy, x.f32(g) + 1, ldx, rows, cols, 0.37f, true);
    d.scaled_copy_2d(s, y.f32(g) + 90, ldy, x.f32(g), ldx, rows, 20, -1.5f, false);
  });
  EXPECT_EQ(nmse(y, rows * ldy), 0.0);
}

TEST_F(CudaBackendTest, DropoutApplyIsBitExact) {
  const int64_t n = 70001;
  Twin x = twin(random_floats(n, 38)), y = twin(random_floats(n, 39));
  both([&](Device& d, Stream& s, bool g) {
    d.dropout_apply(s, y.f32(g), x.f32(g), n, dropout_mask(77, 0.1), true);
    d.dropout_apply(s, y.f32(g) + 5, x.f32(g), n - 5, dropout_mask(78, 0.5), false);
  });
  EXPECT_EQ(nmse(y, n), 0.0);
}

TEST_F(CudaBackendTest, ConversionsAreBitExact) {
  std::vector<float> x = random_floats(65539, 35, -1e3f, 1e3f);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = INFINITY, x[3] = NAN, x[4] = 1.00390625f;  // a tie
  x[5] = 1e-40f;                                                               // denormal
  const int64_t n = static_cast<int64_t>(x.size());
  Twin f = twin(x), h = twin_bytes(nullptr, n * 2), back = zeros(n);
  both([&](Device& d, Stream& s, bool g) {
    d.convert_f32_to_bf16(s, h.bf16(g), f.f32(g), n);
    d.convert_bf16_to_f32(s, back.f32(g), h.bf16(g), n);
  });
  std::vector<bf16_t> gh(static_cast<size_t>(n));
  gpu().copy(*gpu_stream_, gh.data(), h.gpu.data(), n * 2);
  gpu_stream_->synchronize();
  EXPECT_EQ(std::memcmp(gh.data(), h.cpu.data(), static_cast<size_t>(n) * 2), 0);
  const std::vector<float> gb = download(back.gpu.data(), n);
  EXPECT_EQ(std::memcmp(gb.data(), back.cpu.data(), static_cast<size_t>(n) * 4), 0);
}

TEST_F(CudaBackendTest, SumSquares) {
  const int64_t n = 1000003;
  Twin x = twin(random_floats(n, 36)), out = twin_bytes(nullptr, 8);
  both([&](Device& d, Stream& s, bool g) {
    d.sum_squares(s, reinterpret_cast<double*>(g ? out.gpu.data() : out.cpu.data()), x.f32(g), n);
  });
  double g = 0;
  gpu().copy(*gpu_stream_, &g, out.gpu.data(), 8);
  gpu_stream_->synchronize();
  const double c = *static_cast<const double*>(out.cpu.data());
  EXPECT_NEAR(g, c, 1e-10 * c) << "both sum in double (f32 sums would miss by ~1e-7)";
}

// ---- AdamW
// ----------------------------------------------------------------------------------------

TEST_F(CudaBackendTest, AdamWIsBitIdenticalToReference) {
  const int64_t n = 100003;  // not a multiple of any block size
  std::vector<float> param = random_floats(n, 37), m(static_cast<size_t>(n), 0.0f),
                     v(static_cast<size_t>(n), 0.0f);
  param[0] = 1e-40f;  // denormals are kept on both sides
  Buffer dp = gpu().alloc(n * 4).value(), dm = gpu().alloc(n * 4).value();
  Buffer dv = gpu().alloc(n * 4).value(), dg = gpu().alloc(n * 4).value();
  Buffer dh = gpu().alloc(n * 2).value();
  gpu().copy(*gpu_stream_, dp.data(), param.data(), n * 4);
  gpu().fill_zero(*gpu_stream_, dm.data(), n * 4);
  gpu().fill_zero(*gpu_stream_, dv.data(), n * 4);
  std::vector<bf16_t> ref_bf16(static_cast<size_t>(n));
  for (int64_t step = 1; step <= 5; step++) {
    const std::vector<float> grad = random_floats(n, 100 + static_cast<uint64_t>(step), -3, 3);
    AdamWHyper h{.lr = 3e-3f, .weight_decay = 0.1f, .step = step};
    h.grad_scale = step == 3 ? 0.25f : 1.0f;  // a clipped step
    adamw_step_ref(param.data(), m.data(), v.data(), ref_bf16.data(), grad.data(), n, h);
    gpu().copy(*gpu_stream_, dg.data(), grad.data(), n * 4);
    ASSERT_TRUE(
        gpu()
            .adamw_step(*gpu_stream_, dp.f32(), dm.f32(), dv.f32(), dh.bf16(), dg.f32(), n, h)
            .ok());
    gpu_stream_->synchronize();  // grad is a host vector reused next step
  }
  auto same = [&](const Buffer& b, const void* ref, int64_t bytes) {
    std::vector<char> got(static_cast<size_t>(bytes));
    gpu().copy(*gpu_stream_, got.data(), b.data(), bytes);
    gpu_stream_->synchronize();
    return std::memcmp(got.data(), ref, static_cast<size_t>(bytes)) == 0;
  };
  EXPECT_TRUE(same(dp, param.data(), n * 4)) << "param";
  EXPECT_TRUE(same(dm, m.data(), n * 4)) << "m";
  EXPECT_TRUE(same(dv, v.data(), n * 4)) << "v";
  EXPECT_TRUE(same(dh, ref_bf16.data(), n * 2)) << "param_bf16";
}

// ---- NCCL (Note [Collectives on device memory] in dist/device_collectives.h) -------------------
// NCCL refuses two ranks of one communicator on one GPU, so here the world is one process: its
// all-reduce moves every piece to itself (ncclSend/ncclRecv in a group on the stream) and copies
// the received piece back, several rounds deep. The sum's arithmetic over 2 and 3 ranks is the
// same code, checked over MPI in tests/dist_collectives.sh.
TEST_F(CudaBackendTest, NcclAllReduceOfOneRankMovesEveryPieceThroughItself) {
  auto transport = make_nccl_peer_transport(gpu(), single_process_world());
  if (!transport.ok() &&
      transport.status().message().find("built without NCCL") != std::string::npos) {
    GTEST_SKIP() << transport.status().to_string();
  }
  ASSERT_TRUE(transport.ok()) << transport.status().to_string();
  EXPECT_NE((*transport)->describe().find("NCCL 2."), std::string::npos)
      << (*transport)->describe();
  DeviceCollectives sum(gpu(), single_process_world(), std::move(*transport),
                        /*round_elems=*/1000);
  for (int64_t count : {1, 999, 1000, 100003}) {
    const std::vector<float> values = random_floats(count, 7 + static_cast<uint64_t>(count), -5, 5);
    Twin t = twin(values);
    ASSERT_TRUE(sum.all_reduce_sum(*gpu_stream_, t.gpu.f32(), count).ok()) << count;
    EXPECT_TRUE(same_bits(t, count)) << count << " elements";
  }
}

}  // namespace
}  // namespace strata
