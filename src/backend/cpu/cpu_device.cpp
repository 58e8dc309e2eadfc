// The CPU device: "device memory" is an arena of host memory with its own budget, so that the
// budgets and data movement of a CPU run are those of a GPU run (docs/design.md §3). Every op is
// enqueued on the stream's worker thread and runs the kernels of kernels.h there.
//
// Note [The discrete CPU device]
// The CPU device's kernels can read any memory, so code that hands a kernel a host pointer works
// there and breaks on a GPU. "cpu-discrete" (DeviceKind::cpu_discrete) is the same device with
// the GPU's rule enforced: every pointer an op (anything but copy) is given must lie inside a
// device allocation of this device, checked when the op is enqueued; host memory is reached only
// by copy(). A violation is a bug in the caller (STRATA_CHECK, naming the op and the address),
// so a run that finishes on this device has proved that its compute never touched host memory.
// The kernels, and so the bits, are those of the CPU device. It also runs device AdamW on its
// streams, as a GPU does, with the host AdamW's code (the same bits: kernels_adamw.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_stream.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_adamw.h"
#include "backend/cpu/kernels_quant.h"
#include "core/check.h"
#include "core/format.h"
#include "core/math_util.h"

namespace strata {

namespace {

constexpr int64_t kAlignment = 4096;  // page-aligned: usable as O_DIRECT I/O buffers

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& o) : discrete_(o.discrete) {
    stats_.device_budget = o.device_budget_bytes;
  }

  DeviceKind kind() const override {
    return discrete_ ? DeviceKind::cpu_discrete : DeviceKind::cpu;
  }
  std::string name() const override { return discrete_ ? "cpu-discrete" : "cpu"; }

  // Note [Optional device capabilities]: what this device implements below. The plain CPU
  // device lacks device_adamw on purpose: the host adamw_step (kernels_adamw.h) already is that
  // computation over the same memory. The discrete one has it (its device memory is not the
  // host's to step), running that same host code on its stream: the same bits.
  bool supports(Capability c) const override {
    switch (c) {
      case Capability::host_registration:
      case Capability::host_callbacks:
      case Capability::bf16_matmul:
        return true;
      case Capability::device_adamw:
        return discrete_;  // Note [The discrete CPU device]
    }
    return false;
  }

  Result<Buffer> alloc(int64_t bytes) override { return allocate(MemoryKind::device, bytes); }
  Result<Buffer> alloc_host(int64_t bytes) override { return allocate(MemoryKind::host, bytes); }
  // "Device" and host memory are one memory and copies are memcpy, so any host memory is
  // already reachable by the copy engine: registering is correctly a no-op.
  Status register_host_memory(void* p, int64_t bytes) override { return Status::ok_status(); }
  Status unregister_host_memory(void* p) override { return Status::ok_status(); }

  MemoryStats memory_stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak_memory() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.device_peak = stats_.device_in_use;
    stats_.host_peak = stats_.host_in_use;
  }

  void free_buffer(Buffer& b) override {
    std::free(b.data());
    std::lock_guard<std::mutex> lock(mutex_);
    (b.kind() == MemoryKind::device ? stats_.device_in_use : stats_.host_in_use) -= b.bytes();
    if (b.kind() == MemoryKind::device) device_ranges_.erase(reinterpret_cast<uintptr_t>(b.data()));
  }

  std::unique_ptr<Stream> create_stream(const std::string& name) override {
    return std::make_unique<cpu::CpuStream>(name);
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<cpu::CpuEvent>(); }
  Status launch_host_func(Stream& s, std::function<void()> fn) override {
    enqueue(s, std::move(fn));
    return Status::ok_status();
  }

  void copy(Stream& s, void* dst, const void* src, int64_t bytes) override {
    enqueue(s, [=] { std::memcpy(dst, src, static_cast<size_t>(bytes)); });
  }
  void fill_zero(Stream& s, void* dst, int64_t bytes) override {
    require_device("fill_zero", {dst});
    enqueue(s, [=] { std::memset(dst, 0, static_cast<size_t>(bytes)); });
  }

  void matmul(Stream& s, float* out, const float* a, const float* b, const float* bias, int64_t M,
              int64_t N, int64_t K, MatmulOpts o) override {
    require_device("matmul", {out, a, b, bias});
    enqueue(s, [=] { cpu::matmul(out, a, b, bias, M, N, K, o.trans_a, o.trans_b, o.accumulate); });
  }
  Status matmul_bf16(Stream& s, float* out, const bf16_t* a, const bf16_t* b, const float* bias,
                     int64_t M, int64_t N, int64_t K, MatmulOpts o) override {
    require_device("matmul_bf16", {out, a, b, bias});
    // Widening is exact, so this is the f32 matmul of the bf16 values: the reference the CUDA
    // tensor-core path is held to.
    enqueue(s, [=] {
      std::vector<float> a32(static_cast<size_t>(M * K)), b32(static_cast<size_t>(K * N));
      cpu::convert_bf16_to_f32(a32.data(), a, M * K);
      cpu::convert_bf16_to_f32(b32.data(), b, K * N);
      cpu::matmul(out, a32.data(), b32.data(), bias, M, N, K, o.trans_a, o.trans_b, o.accumulate);
    });
    return Status::ok_status();
  }
  void bias_backward(Stream& s, float* dbias, const float* dout, int64_t M, int64_t N) override {
    require_device("bias_backward", {dbias, dout});
    enqueue(s, [=] { cpu::bias_backward(dbias, dout, M, N); });
  }
  void layernorm_forward(Stream& s, float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int64_t N, int64_t C) override {
    require_device("layernorm_forward", {out, mean, rstd, inp, weight, bias});
    enqueue(s, [=] { cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C); });
  }
  void layernorm_backward(Stream& s, float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int64_t N, int64_t C) override {
    require_device("layernorm_backward", {dinp, dweight, dbias, dout, inp, weight, mean, rstd});
    enqueue(s, [=] {
      cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    });
  }
  void gelu_forward(Stream& s, float* out, const float* inp, int64_t n) override {
    require_device("gelu_forward", {out, inp});
    enqueue(s, [=] { cpu::gelu_forward(out, inp, n); });
  }
  void gelu_backward(Stream& s, float* dinp, const float* inp, const float* dout,
                     int64_t n) override {
    require_device("gelu_backward", {dinp, inp, dout});
    enqueue(s, [=] { cpu::gelu_backward(dinp, inp, dout, n); });
  }
  void attention_forward(Stream& s, float* out, float* att, const float* qkv, int64_t B, int64_t T,
                         int64_t C, int64_t NH) override {
    require_device("attention_forward", {out, att, qkv});
    enqueue(s, [=] { cpu::attention_forward(out, att, qkv, B, T, C, NH); });
  }
  void attention_backward(Stream& s, float* dqkv, float* scratch, const float* dout,
                          const float* qkv, const float* att, int64_t B, int64_t T, int64_t C,
                          int64_t NH) override {
    require_device("attention_backward", {dqkv, scratch, dout, qkv, att});
    enqueue(s, [=] { cpu::attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH); });
  }
  int64_t attention_saved_floats(int64_t B, int64_t T, int64_t NH) const override {
    return device_traits(*this).attention_saved_floats(B, T, NH);  // softmax probabilities
  }
  int64_t attention_scratch_floats(int64_t B, int64_t T, int64_t NH) const override {
    return device_traits(*this).attention_scratch_floats(B, T, NH);
  }
  void softmax_cross_entropy_forward(Stream& s, float* losses, float* probs, const float* logits,
                                     const int32_t* targets, int64_t N, int64_t V) override {
    require_device("softmax_cross_entropy_forward", {losses, probs, logits, targets});
    enqueue(s, [=] { cpu::softmax_cross_entropy_forward(losses, probs, logits, targets, N, V); });
  }
  void softmax_cross_entropy_backward(Stream& s, float* dlogits, const float* probs,
                                      const int32_t* targets, float dloss, int64_t N,
                                      int64_t V) override {
    require_device("softmax_cross_entropy_backward", {dlogits, probs, targets});
    enqueue(s, [=] { cpu::softmax_cross_entropy_backward(dlogits, probs, targets, dloss, N, V); });
  }
  void embedding_forward(Stream& s, float* out, const int32_t* tokens, const float* wte,
                         const float* wpe, int64_t B, int64_t T, int64_t C) override {
    require_device("embedding_forward", {out, tokens, wte, wpe});
    enqueue(s, [=] { cpu::embedding_forward(out, tokens, wte, wpe, B, T, C); });
  }
  void embedding_backward(Stream& s, float* dwte, float* dwpe, const float* dout,
                          const int32_t* tokens, int64_t B, int64_t T, int64_t C) override {
    require_device("embedding_backward", {dwte, dwpe, dout, tokens});
    enqueue(s, [=] { cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T, C); });
  }
  void add(Stream& s, float* out, const float* a, const float* b, int64_t n) override {
    require_device("add", {out, a, b});
    enqueue(s, [=] { cpu::add(out, a, b, n); });
  }
  void dropout_apply(Stream& s, float* out, const float* inp, int64_t n, const DropoutMask& m,
                     bool accumulate) override {
    require_device("dropout_apply", {out, inp});
    enqueue(s, [=] { cpu::dropout_apply(out, inp, n, m, accumulate); });
  }
  void scaled_copy_2d(Stream& s, float* y, int64_t ldy, const float* x, int64_t ldx, int64_t rows,
                      int64_t cols, float alpha, bool accumulate) override {
    require_device("scaled_copy_2d", {y, x});
    enqueue(s, [=] { cpu::scaled_copy_2d(y, ldy, x, ldx, rows, cols, alpha, accumulate); });
  }
  void scaled_add(Stream& s, float* y, const float* x, float alpha, int64_t n) override {
    require_device("scaled_add", {y, x});
    enqueue(s, [=] { cpu::scaled_add(y, x, alpha, n); });
  }
  void convert_f32_to_bf16(Stream& s, bf16_t* out, const float* inp, int64_t n) override {
    require_device("convert_f32_to_bf16", {out, inp});
    enqueue(s, [=] { cpu::convert_f32_to_bf16(out, inp, n); });
  }
  void convert_bf16_to_f32(Stream& s, float* out, const bf16_t* inp, int64_t n) override {
    require_device("convert_bf16_to_f32", {out, inp});
    enqueue(s, [=] { cpu::convert_bf16_to_f32(out, inp, n); });
  }
  void sum_squares(Stream& s, double* out, const float* x, int64_t n) override {
    require_device("sum_squares", {out, x});
    enqueue(s, [=] { cpu::sum_squares(out, x, n); });
  }
  void rmsnorm_forward(Stream& s, float* out, float* rstd, const float* inp, const float* weight,
                       int64_t N, int64_t C, float eps) override {
    require_device("rmsnorm_forward", {out, rstd, inp, weight});
    enqueue(s, [=] { cpu::rmsnorm_forward(out, rstd, inp, weight, N, C, eps); });
  }
  void rmsnorm_backward(Stream& s, float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, const float* rstd, int64_t N, int64_t C) override {
    require_device("rmsnorm_backward", {dinp, dweight, dout, inp, weight, rstd});
    enqueue(s, [=] { cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C); });
  }
  void rope_forward(Stream& s, float* out, const float* inp, const float* rope, int64_t B,
                    int64_t T, int64_t row, int64_t n_rot_heads, int64_t hs) override {
    require_device("rope_forward", {out, inp, rope});
    enqueue(s, [=] { cpu::rope_forward(out, inp, rope, B, T, row, n_rot_heads, hs); });
  }
  void rope_backward(Stream& s, float* dinp, const float* dout, const float* rope, int64_t B,
                     int64_t T, int64_t row, int64_t n_rot_heads, int64_t hs) override {
    require_device("rope_backward", {dinp, dout, rope});
    enqueue(s, [=] { cpu::rope_backward(dinp, dout, rope, B, T, row, n_rot_heads, hs); });
  }
  void swiglu_forward(Stream& s, float* out, const float* gu, int64_t N, int64_t F) override {
    require_device("swiglu_forward", {out, gu});
    enqueue(s, [=] { cpu::swiglu_forward(out, gu, N, F); });
  }
  void swiglu_backward(Stream& s, float* dgu, const float* gu, const float* dout, int64_t N,
                       int64_t F) override {
    require_device("swiglu_backward", {dgu, gu, dout});
    enqueue(s, [=] { cpu::swiglu_backward(dgu, gu, dout, N, F); });
  }
  void repeat_kv_forward(Stream& s, float* out, const float* inp, int64_t B, int64_t T, int64_t NH,
                         int64_t NKV, int64_t hs) override {
    require_device("repeat_kv_forward", {out, inp});
    enqueue(s, [=] { cpu::repeat_kv_forward(out, inp, B, T, NH, NKV, hs); });
  }
  void repeat_kv_backward(Stream& s, float* dinp, const float* dout, int64_t B, int64_t T,
                          int64_t NH, int64_t NKV, int64_t hs) override {
    require_device("repeat_kv_backward", {dinp, dout});
    enqueue(s, [=] { cpu::repeat_kv_backward(dinp, dout, B, T, NH, NKV, hs); });
  }
  void attention_decode(Stream& s, float* out, float* scratch, const float* q, const float* kv,
                        int64_t T, int64_t NH, int64_t NKV, int64_t hs) override {
    require_device("attention_decode", {out, scratch, q, kv});
    enqueue(s, [=] { cpu::attention_decode(out, scratch, q, kv, T, NH, NKV, hs); });
  }

  // The discrete device only (supports(device_adamw)): the host AdamW on the stream's worker.
  Status adamw_step(Stream& s, float* param, float* m, float* v, bf16_t* param_bf16,
                    const float* grad, int64_t n, const AdamWHyper& h) override {
    if (!discrete_) return unsupported(Capability::device_adamw);
    require_device("adamw_step", {param, m, v, param_bf16, grad});
    enqueue(s, [=] { strata::adamw_step(param, m, v, param_bf16, grad, n, h); });
    return Status::ok_status();
  }

  // ---- quantized weights ----------------------------------------------------------------------
  void dequantize(Stream& s, float* out, const void* quantized, QuantFormat fmt,
                  int64_t n) override {
    STRATA_CHECK(n >= 0);
    require_device("dequantize", {out, quantized});
    enqueue(s, [=] { cpu::dequantize(out, quantized, fmt, n); });
  }

 private:
  // Note [The discrete CPU device]: on the discrete device every pointer an op is given (null:
  // an absent optional argument) lies inside one of this device's allocations.
  void require_device(const char* op, std::initializer_list<const void*> ptrs) const {
    if (!discrete_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    for (const void* p : ptrs) {
      if (p == nullptr) continue;
      const auto a = reinterpret_cast<uintptr_t>(p);
      auto it = device_ranges_.upper_bound(a);
      const bool inside = it != device_ranges_.begin() && a < (--it)->second;
      STRATA_CHECK_MSG(inside, (std::string("cpu-discrete: ") + op + " was given memory at " +
                                format_address(p) +
                                " that is no device allocation: a kernel reads only device "
                                "memory, host memory moves by copy()")
                                   .c_str());
    }
  }
  static std::string format_address(const void* p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", p);
    return buf;
  }

  static void enqueue(Stream& s, std::function<void()> task) {
    cpu::as_cpu(s).enqueue(std::move(task));
  }

  Result<Buffer> allocate(MemoryKind kind, int64_t bytes) {
    STRATA_CHECK(bytes >= 0);
    const int64_t rounded = round_up(bytes, kAlignment);
    // Reserve under the lock first, so two threads cannot both squeeze under the budget.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (kind == MemoryKind::device && stats_.device_budget > 0 &&
          stats_.device_in_use + rounded > stats_.device_budget) {
        return out_of_memory("device budget: allocating " + format_bytes(rounded) + " with " +
                             format_bytes(stats_.device_in_use) + " in use exceeds " +
                             format_bytes(stats_.device_budget));
      }
      int64_t& in_use = kind == MemoryKind::device ? stats_.device_in_use : stats_.host_in_use;
      int64_t& peak = kind == MemoryKind::device ? stats_.device_peak : stats_.host_peak;
      in_use += rounded;
      peak = std::max(peak, in_use);
    }
    void* p = std::aligned_alloc(kAlignment, static_cast<size_t>(std::max(rounded, kAlignment)));
    if (p == nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      (kind == MemoryKind::device ? stats_.device_in_use : stats_.host_in_use) -= rounded;
      return out_of_memory("host allocator refused " + format_bytes(rounded) + " for the " +
                           (kind == MemoryKind::device ? "device arena" : "host buffers"));
    }
    if (kind == MemoryKind::device) {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto a = reinterpret_cast<uintptr_t>(p);
      device_ranges_[a] = a + static_cast<uintptr_t>(std::max(rounded, kAlignment));
    }
    return Buffer(this, kind, p, rounded);
  }

  const bool discrete_;
  mutable std::mutex mutex_;
  MemoryStats stats_;
  // Discrete device: every live device allocation, start -> end (Note [The discrete CPU device]).
  std::map<uintptr_t, uintptr_t> device_ranges_;
};

}  // namespace

std::unique_ptr<Device> create_cpu_device(const CpuDeviceOptions& options) {
  return std::make_unique<CpuDevice>(options);
}

}  // namespace strata
