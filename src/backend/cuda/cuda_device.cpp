// The CUDA device: device memory from a caching pool over cudaMalloc (cuda_pool.h), pinned host
// memory from cudaHostAlloc, real streams and events (cuda_stream.h), copies through the copy
// engines, GEMMs on cuBLASLt (cuda_gemm.h), and every other op from the kernels of kernels.cuh.
// Everything is enqueued: no op synchronizes the host (Note [Asynchronous by contract]).
//
// Every entry point that touches CUDA first makes this device's GPU current on the calling
// thread (cudaSetDevice is per thread, and a storage-engine thread that calls copy() has never set
// it); on one GPU this costs a thread-local store.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "backend/adamw_hyper.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device_kernels.cuh"
#include "backend/cuda/cuda_pool.h"
#include "backend/cuda/cuda_stream.h"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/kernels_quant.cuh"
#include "core/math_util.h"

namespace strata {

namespace {

using cuda_backend::as_cuda;
using cuda_backend::CudaPool;
using cuda_backend::CudaStream;
using cuda_backend::format_mib;

constexpr int64_t kPage = 4096;  // buffer sizes are whole pages, as on the CPU device

// cudaLaunchHostFunc's callback: runs and frees the std::function launch_host_func boxed.
void CUDART_CB run_boxed_host_func(void* box) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(box));
  (*fn)();
}

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, int64_t budget_bytes, int64_t total_bytes, std::string name)
      : ordinal_(ordinal),
        total_bytes_(total_bytes),
        name_(std::move(name)),
        pool_(ordinal, budget_bytes) {}

  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override { return name_; }

  // Note [Optional device capabilities]: this device implements every optional slot.
  bool supports(Capability c) const override {
    switch (c) {
      case Capability::host_registration:
      case Capability::host_callbacks:
      case Capability::bf16_matmul:
      case Capability::device_adamw:
        return true;
    }
    return false;
  }

  // ---- memory -----------------------------------------------------------------------------------
  Result<Buffer> alloc(int64_t bytes) override {
    STRATA_CHECK(bytes >= 0);
    STRATA_ASSIGN_OR_RETURN(void* p, pool_.allocate(bytes));
    return Buffer(this, MemoryKind::device, p, round_up(bytes, kPage));
  }

  Result<Buffer> alloc_host(int64_t bytes) override {
    STRATA_CHECK(bytes >= 0);
    const int64_t rounded = round_up(bytes, kPage);
    activate();
    void* p = nullptr;
    const cudaError_t err =
        cudaHostAlloc(&p, static_cast<size_t>(std::max(rounded, kPage)), cudaHostAllocDefault);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // recoverable; keep it out of the next launch check
      return out_of_memory("cudaHostAlloc refused " + format_mib(rounded) + " of pinned memory " +
                           "with " + format_mib(memory_stats().host_in_use) + " pinned already");
    }
    STRATA_CUDA_CHECK(err);
    // cudaHostAlloc maps whole pages; Buffers promise O_DIRECT alignment (backend.h).
    STRATA_CHECK(reinterpret_cast<uintptr_t>(p) % kPage == 0);
    std::lock_guard<std::mutex> lock(host_mutex_);
    host_in_use_ += rounded;
    host_peak_ = std::max(host_peak_, host_in_use_);
    return Buffer(this, MemoryKind::host, p, rounded);
  }

  Status register_host_memory(void* p, int64_t bytes) override {
    STRATA_CHECK(p != nullptr && bytes > 0);
    activate();
    const cudaError_t err =
        cudaHostRegister(p, static_cast<size_t>(bytes), cudaHostRegisterDefault);
    if (err == cudaSuccess) return Status::ok_status();
    (void)cudaGetLastError();
    const std::string what =
        "cudaHostRegister of " + format_mib(bytes) + ": " + cudaGetErrorString(err);
    // Pinning can run into the locked-memory limit (ulimit -l): a resource, not a bug.
    if (err == cudaErrorMemoryAllocation) return out_of_memory(what);
    return invalid_argument(what);
  }

  Status unregister_host_memory(void* p) override {
    activate();
    const cudaError_t err = cudaHostUnregister(p);
    if (err == cudaSuccess) return Status::ok_status();
    (void)cudaGetLastError();
    return invalid_argument(std::string("cudaHostUnregister: ") + cudaGetErrorString(err));
  }

  MemoryStats memory_stats() const override {
    MemoryStats m;
    m.device_in_use = pool_.in_use();
    m.device_peak = pool_.peak();
    m.device_budget = pool_.budget();
    m.device_total = total_bytes_;
    std::lock_guard<std::mutex> lock(host_mutex_);
    m.host_in_use = host_in_use_;
    m.host_peak = host_peak_;
    return m;
  }

  void reset_peak_memory() override {
    pool_.reset_peak();
    std::lock_guard<std::mutex> lock(host_mutex_);
    host_peak_ = host_in_use_;
  }

  void free_buffer(Buffer& b) override {
    if (b.kind() == MemoryKind::device) {
      pool_.release(b.data());
      return;
    }
    activate();
    STRATA_CUDA_CHECK(cudaFreeHost(b.data()));
    std::lock_guard<std::mutex> lock(host_mutex_);
    host_in_use_ -= b.bytes();
  }

  // ---- streams, events ------------------------------------------------------------------------
  std::unique_ptr<Stream> create_stream(const std::string& name) override {
    return std::make_unique<CudaStream>(name, ordinal_);
  }
  std::unique_ptr<Event> create_event() override {
    return std::make_unique<cuda_backend::CudaEvent>(ordinal_);
  }
  // fn runs on a CUDA runtime thread in stream order. It must not call CUDA (the runtime forbids
  // it in host functions, and that includes enqueuing on any Strata stream), and should not block
  // on other streams' host functions, which may share that thread.
  Status launch_host_func(Stream& s, std::function<void()> fn) override {
    auto box = std::make_unique<std::function<void()>>(std::move(fn));
    STRATA_CUDA_CHECK(cudaLaunchHostFunc(stream(s), run_boxed_host_func, box.get()));
    box.release();  // run_boxed_host_func owns it now
    return Status::ok_status();
  }

  // ---- copies ---------------------------------------------------------------------------------
  // cudaMemcpyDefault: unified addressing tells the direction from the pointers. From pinned or
  // registered host memory the copy engine reads it directly; from pageable memory CUDA stages it
  // (correct, but the host call may block until the data is copied).
  void copy(Stream& s, void* dst, const void* src, int64_t bytes) override {
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream(s)));
  }
  void fill_zero(Stream& s, void* dst, int64_t bytes) override {
    STRATA_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), stream(s)));
  }

  // ---- ops ------------------------------------------------------------------------------------
  void matmul(Stream& s, float* out, const float* a, const float* b, const float* bias, int64_t M,
              int64_t N, int64_t K, MatmulOpts o) override {
    const cudaStream_t st = stream(s);  // first: makes the GPU current for gemm(s)'s creation
    gemm(s).matmul(st, CUDA_R_32F, out, a, b, bias, M, N, K, o.trans_a, o.trans_b, o.accumulate);
  }
  Status matmul_bf16(Stream& s, float* out, const bf16_t* a, const bf16_t* b, const float* bias,
                     int64_t M, int64_t N, int64_t K, MatmulOpts o) override {
    const cudaStream_t st = stream(s);
    gemm(s).matmul(st, CUDA_R_16BF, out, a, b, bias, M, N, K, o.trans_a, o.trans_b, o.accumulate);
    return Status::ok_status();
  }
  void bias_backward(Stream& s, float* dbias, const float* dout, int64_t M, int64_t N) override {
    cuda_bias_backward(stream(s), dbias, dout, M, N);
  }
  void layernorm_forward(Stream& s, float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int64_t N, int64_t C) override {
    cuda_layernorm_forward(stream(s), out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(Stream& s, float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int64_t N, int64_t C) override {
    cuda_layernorm_backward(stream(s), dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void gelu_forward(Stream& s, float* out, const float* inp, int64_t n) override {
    cuda_gelu_forward(stream(s), out, inp, n);
  }
  void gelu_backward(Stream& s, float* dinp, const float* inp, const float* dout,
                     int64_t n) override {
    cuda_gelu_backward(stream(s), dinp, inp, dout, n);
  }
  void attention_forward(Stream& s, float* out, float* att, const float* qkv, int64_t B, int64_t T,
                         int64_t C, int64_t NH) override {
    check_head_size(C, NH);
    cuda_attention_forward(stream(s), out, att, qkv, B, T, C, NH);
  }
  void attention_backward(Stream& s, float* dqkv, float* scratch, const float* dout,
                          const float* qkv, const float* att, int64_t B, int64_t T, int64_t C,
                          int64_t NH) override {
    check_head_size(C, NH);
    cuda_attention_backward(stream(s), dqkv, scratch, dout, qkv, att, B, T, C, NH);
  }
  int64_t attention_saved_floats(int64_t B, int64_t T, int64_t NH) const override {
    return device_traits(*this).attention_saved_floats(B, T, NH);  // per-row log-sum-exp
  }
  int64_t attention_scratch_floats(int64_t B, int64_t T, int64_t NH) const override {
    return device_traits(*this).attention_scratch_floats(B, T, NH);
  }
  void softmax_cross_entropy_forward(Stream& s, float* losses, float* probs, const float* logits,
                                     const int32_t* targets, int64_t N, int64_t V) override {
    cuda_softmax_cross_entropy_forward(stream(s), losses, probs, logits, targets, N, V);
  }
  void softmax_cross_entropy_backward(Stream& s, float* dlogits, const float* probs,
                                      const int32_t* targets, float dloss, int64_t N,
                                      int64_t V) override {
    cuda_softmax_cross_entropy_backward(stream(s), dlogits, probs, targets, dloss, N, V);
  }
  void embedding_forward(Stream& s, float* out, const int32_t* tokens, const float* wte,
                         const float* wpe, int64_t B, int64_t T, int64_t C) override {
    cuda_embedding_forward(stream(s), out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(Stream& s, float* dwte, float* dwpe, const float* dout,
                          const int32_t* tokens, int64_t B, int64_t T, int64_t C) override {
    cuda_embedding_backward(stream(s), dwte, dwpe, dout, tokens, B, T, C);
  }
  void add(Stream& s, float* out, const float* a, const float* b, int64_t n) override {
    cuda_add(stream(s), out, a, b, n);
  }
  void dropout_apply(Stream& s, float* out, const float* inp, int64_t n, const DropoutMask& m,
                     bool accumulate) override {
    cuda_dropout_apply(stream(s), out, inp, n, m, accumulate);
  }
  void scaled_copy_2d(Stream& s, float* y, int64_t ldy, const float* x, int64_t ldx, int64_t rows,
                      int64_t cols, float alpha, bool accumulate) override {
    cuda_scaled_copy_2d(stream(s), y, ldy, x, ldx, rows, cols, alpha, accumulate);
  }
  void scaled_add(Stream& s, float* y, const float* x, float alpha, int64_t n) override {
    cuda_scaled_add(stream(s), y, x, alpha, n);
  }
  void convert_f32_to_bf16(Stream& s, bf16_t* out, const float* inp, int64_t n) override {
    cuda_convert_f32_to_bf16(stream(s), out, inp, n);
  }
  void convert_bf16_to_f32(Stream& s, float* out, const bf16_t* inp, int64_t n) override {
    cuda_convert_bf16_to_f32(stream(s), out, inp, n);
  }
  void sum_squares(Stream& s, double* out, const float* x, int64_t n) override {
    cuda_sum_squares(stream(s), out, x, n);
  }
  void rmsnorm_forward(Stream& s, float* out, float* rstd, const float* inp, const float* weight,
                       int64_t N, int64_t C, float eps) override {
    cuda_rmsnorm_forward(stream(s), out, rstd, inp, weight, N, C, eps);
  }
  void rmsnorm_backward(Stream& s, float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, const float* rstd, int64_t N, int64_t C) override {
    cuda_rmsnorm_backward(stream(s), dinp, dweight, dout, inp, weight, rstd, N, C);
  }
  void rope_forward(Stream& s, float* out, const float* inp, const float* rope, int64_t B,
                    int64_t T, int64_t row, int64_t n_rot_heads, int64_t hs) override {
    cuda_rope_forward(stream(s), out, inp, rope, B, T, row, n_rot_heads, hs);
  }
  void rope_backward(Stream& s, float* dinp, const float* dout, const float* rope, int64_t B,
                     int64_t T, int64_t row, int64_t n_rot_heads, int64_t hs) override {
    cuda_rope_backward(stream(s), dinp, dout, rope, B, T, row, n_rot_heads, hs);
  }
  void swiglu_forward(Stream& s, float* out, const float* gu, int64_t N, int64_t F) override {
    cuda_swiglu_forward(stream(s), out, gu, N, F);
  }
  void swiglu_backward(Stream& s, float* dgu, const float* gu, const float* dout, int64_t N,
                       int64_t F) override {
    cuda_swiglu_backward(stream(s), dgu, gu, dout, N, F);
  }
  void repeat_kv_forward(Stream& s, float* out, const float* inp, int64_t B, int64_t T, int64_t NH,
                         int64_t NKV, int64_t hs) override {
    cuda_repeat_kv_forward(stream(s), out, inp, B, T, NH, NKV, hs);
  }
  void repeat_kv_backward(Stream& s, float* dinp, const float* dout, int64_t B, int64_t T,
                          int64_t NH, int64_t NKV, int64_t hs) override {
    cuda_repeat_kv_backward(stream(s), dinp, dout, B, T, NH, NKV, hs);
  }
  void attention_decode(Stream& s, float* out, float* scratch, const float* q, const float* kv,
                        int64_t T, int64_t NH, int64_t NKV, int64_t hs) override {
    cuda_attention_decode(stream(s), out, scratch, q, kv, T, NH, NKV, hs);
  }

  Status adamw_step(Stream& s, float* param, float* m, float* v, bf16_t* param_bf16,
                    const float* grad, int64_t n, const AdamWHyper& h) override {
    STRATA_CHECK(n >= 0);
    cuda_adamw_step(stream(s), param, m, v, param_bf16, grad, n, detail::adamw_constants(h));
    return Status::ok_status();
  }

  // ---- quantized weights ----------------------------------------------------------------------
  void dequantize(Stream& s, float* out, const void* quantized, QuantFormat fmt,
                  int64_t n) override {
    STRATA_CHECK(n >= 0);
    cuda_dequantize(stream(s), out, quantized, fmt, n);
  }

 private:
  void activate() const { STRATA_CUDA_CHECK(cudaSetDevice(ordinal_)); }

  // The CUDA stream behind s, with this device's GPU made current for the launch that follows.
  cudaStream_t stream(Stream& s) const {
    activate();
    return as_cuda(s).handle();
  }

  cuda_backend::GemmContext& gemm(Stream& s) {
    return as_cuda(s).gemm([this] {
      // The workspace counts against the budget like any buffer; a stream the budget cannot
      // give one runs its GEMMs without (Note [GEMM precision and reproducibility]).
      auto r = alloc(cuda_backend::GemmContext::kWorkspaceBytes);
      return r.ok() ? std::move(r).value() : Buffer();
    });
  }

  static void check_head_size(int64_t C, int64_t NH) {
    STRATA_CHECK(NH > 0 && C % NH == 0);
    if (!cuda_attention_supports_head_size(C / NH)) {
      const std::string msg = "the fused CUDA attention has no kernel for head size " +
                              std::to_string(C / NH) + " (C=" + std::to_string(C) +
                              ", NH=" + std::to_string(NH) + ")";
      detail::check_failed(__FILE__, __LINE__, "cuda_attention_supports_head_size", msg.c_str());
    }
  }

  const int ordinal_;
  const int64_t total_bytes_;  // cudaDeviceProp::totalGlobalMem
  const std::string name_;
  CudaPool pool_;
  mutable std::mutex host_mutex_;  // host_in_use_, host_peak_
  int64_t host_in_use_ = 0;
  int64_t host_peak_ = 0;
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

Result<std::unique_ptr<Device>> create_cuda_device(int ordinal, int64_t device_budget_bytes) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return unavailable(std::string("no usable CUDA device: ") + cudaGetErrorString(err));
  }
  if (count == 0) return unavailable("no CUDA device present");
  if (ordinal < 0 || ordinal >= count) {
    return invalid_argument("CUDA device " + std::to_string(ordinal) + " asked for, but " +
                            std::to_string(count) + " present");
  }
  if (device_budget_bytes < 0) return invalid_argument("negative CUDA device budget");
  cudaDeviceProp prop{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  // The build carries sm_80 and sm_90 code plus compute_90 PTX (CMakeLists.txt): nothing older
  // than Ampere can run it.
  if (prop.major < 8) {
    return unavailable("GPU " + std::to_string(ordinal) + " (" + prop.name +
                       ") has compute capability " + std::to_string(prop.major) + "." +
                       std::to_string(prop.minor) + "; Strata's CUDA build needs 8.0 or newer");
  }
  // Create the context now, so a broken driver shows here and not in the first op.
  err = cudaSetDevice(ordinal);
  if (err == cudaSuccess) err = cudaFree(nullptr);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return unavailable("CUDA device " + std::to_string(ordinal) + ": " + cudaGetErrorString(err));
  }
  const std::string name = "cuda:" + std::to_string(ordinal) + " (" + prop.name + ")";
  return std::unique_ptr<Device>(std::make_unique<CudaDevice>(
      ordinal, device_budget_bytes, static_cast<int64_t>(prop.totalGlobalMem), name));
}

}  // namespace strata
