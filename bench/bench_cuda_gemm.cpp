// GEMM throughput on the GPT-2 shapes: Strata's bf16 path (Device::matmul_bf16: cuBLASLt with
// its first heuristic choice, called through the Device interface) against the best of
// cuBLASLt's top heuristic candidates for the same problem (same precision, epilogue and
// workspace), each timed. "best" is thus "the fastest of what cuBLASLt proposes", not an
// exhaustive search over every algorithm and tile configuration. A square 8192^3 bf16 GEMM gives
// the measured peak the training figures are compared with.
//
//   bench_cuda_gemm [--tokens 8192] [--candidates 16]
// Last line: one JSON object.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_gemm.h"
#include "core/dtype.h"

namespace strata {
namespace {

struct Shape {
  std::string name;
  int64_t M, N, K;
  bool trans_a, trans_b, bias;
};

struct Row {
  Shape shape;
  double ours_ms = 0, best_ms = 0;
  int best_index = -1, candidates = 0;
};

double flops(const Shape& s) {
  return 2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K);
}

// Mean milliseconds per call of fn over `iters` calls, after `warmup` untimed ones. Host timing
// around a stream synchronize: it includes what a caller pays to enqueue.
template <typename Fn, typename Sync>
double time_ms(Fn fn, Sync sync, int warmup, int iters) {
  for (int i = 0; i < warmup; i++) fn();
  sync();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; i++) fn();
  sync();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count() / iters;
}

std::vector<Shape> gpt2_shapes(int64_t BT, int64_t C, int64_t V) {
  std::string c = "C";  // appended, not "C" + ...: GCC 12 warns falsely (-Wrestrict) on that
  c += std::to_string(C) + ".";
  return {
      {c + "qkv", BT, 3 * C, C, false, true, true},
      {c + "attn_proj", BT, C, C, false, true, true},
      {c + "fc", BT, 4 * C, C, false, true, true},
      {c + "fc_proj", BT, C, 4 * C, false, true, true},
      {c + "fc_proj.dinp", BT, 4 * C, C, false, false, false},
      {c + "fc_proj.dweight", C, 4 * C, BT, true, false, false},
      {c + "lm_head", BT, V, C, false, true, false},
  };
}

int run(int argc, char** argv) {
  int64_t tokens = 8192;  // B*T of one micro-batch: 8 x 1024
  int candidates = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tokens") == 0) tokens = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--candidates") == 0) candidates = std::atoi(argv[i + 1]);
  }
  auto made = create_cuda_device();
  if (!made.ok()) {
    std::printf("{\"bench\": \"cuda_gemm\", \"error\": \"%s\"}\n", made.status().message().c_str());
    return 1;
  }
  Device& dev = *made.value();
  if (!dev.supports(Capability::bf16_matmul)) {
    std::printf("{\"bench\": \"cuda_gemm\", \"error\": \"%s\"}\n",
                dev.unsupported(Capability::bf16_matmul).message().c_str());
    return 1;
  }
  auto stream = dev.create_stream("bench");

  std::vector<Shape> shapes = gpt2_shapes(tokens, 768, 50257);           // GPT-2 small
  for (auto& s : gpt2_shapes(tokens, 1600, 50257)) shapes.push_back(s);  // GPT-2 XL (1.5B)
  shapes.push_back({"peak.8192cubed", 8192, 8192, 8192, false, true, false});

  int64_t max_a = 0, max_b = 0, max_out = 0, max_n = 0;
  for (const auto& s : shapes) {
    max_a = std::max(max_a, s.M * s.K);
    max_b = std::max(max_b, s.K * s.N);
    max_out = std::max(max_out, s.M * s.N);
    max_n = std::max(max_n, s.N);
  }
  Buffer a = dev.alloc(max_a * 2).value(), b = dev.alloc(max_b * 2).value();
  Buffer out = dev.alloc(max_out * 4).value(), bias = dev.alloc(max_n * 4).value();
  {
    // Values in [-1, 1): bf16 of a simple hash, so no GEMM runs on zeros.
    std::vector<bf16_t> h(static_cast<size_t>(std::max(max_a, max_b)));
    for (size_t i = 0; i < h.size(); i++) {
      h[i] = f32_to_bf16(static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f);
    }
    dev.copy(*stream, a.data(), h.data(), max_a * 2);
    dev.copy(*stream, b.data(), h.data(), max_b * 2);
    dev.fill_zero(*stream, bias.data(), max_n * 4);
    stream->synchronize();
  }

  // The reference side: its own handle, stream and workspace, the size our streams use.
  cublasLtHandle_t lt = nullptr;
  STRATA_CUDA_CHECK(cublasLtCreate(&lt));
  cudaStream_t raw = nullptr;
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking));
  const int64_t ws_bytes = cuda_backend::GemmContext::kWorkspaceBytes;
  Buffer ws = dev.alloc(ws_bytes).value();

  std::vector<Row> rows;
  for (const auto& s : shapes) {
    Row r{s};
    const int iters = flops(s) > 1e12 ? 10 : 30;
    r.ours_ms = time_ms(
        [&] {
          // supports() said yes above, so the Status cannot be unavailable, the only thing it
          // reports (Note [Optional device capabilities]); nothing to check in the timed loop.
          (void)dev.matmul_bf16(*stream, out.f32(), a.bf16(), b.bf16(),
                                s.bias ? bias.f32() : nullptr, s.M, s.N, s.K,
                                {.trans_a = s.trans_a, .trans_b = s.trans_b});
        },
        [&] { stream->synchronize(); }, 3, iters);

    cuda_backend::GemmDesc desc({CUDA_R_16BF, s.M, s.N, s.K, s.trans_a, s.trans_b, s.bias});
    const auto found = desc.heuristics(lt, candidates, ws_bytes, 16);
    r.candidates = static_cast<int>(found.size());
    for (int i = 0; i < r.candidates; i++) {
      bool failed = false;
      const double ms = time_ms(
          [&] {
            const cublasStatus_t st =
                desc.run(lt, found[static_cast<size_t>(i)].algo, out.f32(), a.data(), b.data(),
                         s.bias ? bias.f32() : nullptr, false, ws.data(), ws_bytes, raw);
            failed = failed || st != CUBLAS_STATUS_SUCCESS;
          },
          [&] { STRATA_CUDA_CHECK(cudaStreamSynchronize(raw)); }, 2, iters);
      if (!failed && (r.best_index < 0 || ms < r.best_ms)) {
        r.best_ms = ms;
        r.best_index = i;
      }
    }
    std::printf(
        "%-24s M=%-6lld N=%-6lld K=%-6lld  ours %7.1f TFLOP/s  best %7.1f TFLOP/s "
        "(candidate %d of %d)  ours/best %.3f\n",
        s.name.c_str(), static_cast<long long>(s.M), static_cast<long long>(s.N),
        static_cast<long long>(s.K), flops(s) / r.ours_ms * 1e-9,
        r.best_ms > 0 ? flops(s) / r.best_ms * 1e-9 : 0.0, r.best_index, r.candidates,
        r.best_ms > 0 ? r.best_ms / r.ours_ms : 0.0);
    std::fflush(stdout);
    rows.push_back(r);
  }
  STRATA_CUDA_CHECK(cudaStreamDestroy(raw));
  (void)cublasLtDestroy(lt);

  // One JSON line: per shape, then the model mix (every shape but the peak, time-weighted).
  double mix_flops = 0, mix_ours = 0, mix_best = 0, peak = 0;
  std::string per_shape;
  for (const auto& r : rows) {
    const double ours = flops(r.shape) / r.ours_ms * 1e-9;
    const double best = r.best_ms > 0 ? flops(r.shape) / r.best_ms * 1e-9 : 0.0;
    peak = std::max({peak, ours, best});
    if (r.shape.name.rfind("peak", 0) != 0) {
      mix_flops += flops(r.shape);
      mix_ours += r.ours_ms;
      mix_best += r.best_ms > 0 ? r.best_ms : r.ours_ms;
    }
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s{\"name\": \"%s\", \"ours_tflops\": %.1f, \"best_tflops\": %.1f}",
                  per_shape.empty() ? "" : ", ", r.shape.name.c_str(), ours, best);
    per_shape += buf;
  }
  std::printf(
      "{\"bench\": \"cuda_gemm\", \"device\": \"%s\", \"dtype\": \"bf16 in, f32 accumulate/out\", "
      "\"tokens\": %lld, \"ours_mix_tflops\": %.1f, \"best_mix_tflops\": %.1f, "
      "\"ours_over_best\": %.3f, \"measured_peak_tflops\": %.1f, \"shapes\": [%s]}\n",
      dev.name().c_str(), static_cast<long long>(tokens), mix_flops / mix_ours * 1e-9,
      mix_flops / mix_best * 1e-9, mix_best / mix_ours, peak, per_shape.c_str());
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  return strata::run(argc, argv);
}
