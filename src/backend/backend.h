// The device interface every backend implements: device, buffer, stream, event, and the op
// entry points the GPT-2 and Llama forward and backward need. A few slots are optional, each
// marked "(optional, Capability::...)" where it is declared; a caller asks supports() before
// relying on one (Note [Optional device capabilities]).
//
// Note [Asynchronous by contract]
// Every op and copy is *enqueued* on a Stream and may run later, on another thread (CPU backend)
// or on the GPU (CUDA backend). Work on one stream runs in order; work on different streams is
// ordered only through Events (record on one stream, wait on another). The host must call
// Stream::synchronize() or Event::synchronize() before reading anything a stream writes. Pointers
// handed to an op must stay valid until the op has run. Code written against this interface never
// assumes that a call has finished when it returns, even on the CPU.

// Note [Backward accumulates]
// Backward ops add into their gradient outputs (dinp += ..., dweight += ...), as in llm.c, so that
// gradients from several micro-batches and from the two branches of a residual sum without extra
// passes. Callers zero gradient buffers (fill_zero) before the first contribution.

// Note [Optional device capabilities]
// Most slots are required: every backend implements them. The few marked "(optional, Capability
// ::x)" below are slots a backend may lack. For those:
//  - supports(x) says, before any call, whether this device implements the slot; it is constant
//    for the device's lifetime.
//  - Every optional slot returns a Status. Without the slot (the default implementation) it does
//    nothing, enqueues nothing and returns unavailable naming the device and the capability
//    (unsupported(x)); with it, never unavailable, only the slot's own errors. For a slot that
//    enqueues work (Note [Asynchronous by contract]) the Status says only whether it exists.
// A caller with another way to do the work (the CPU optimizer instead of adamw_step, say) asks
// supports() once and picks its path; a caller without one propagates the Status. Neither aborts:
// a missing capability is a property of the machine, not a bug.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backend/adamw_hyper.h"
#include "backend/quant.h"
#include "core/config_enums.h"
#include "core/dropout_mask.h"
#include "core/dtype.h"
#include "core/status.h"

namespace strata {

class Device;

// DeviceKind (cpu, cuda) is in core/config_enums.h: the config names devices too.
// The optional slots of Device, one value per slot (or pair of slots), named for what they do;
// see Note [Optional device capabilities].
enum class Capability : uint8_t {
  host_registration,  // register_host_memory, unregister_host_memory
  host_callbacks,     // launch_host_func
  bf16_matmul,        // matmul_bf16
  device_adamw,       // adamw_step
};
inline constexpr int kCapabilityCount = 4;
// "host_registration", "host_callbacks", ...: the enumerator's own name, for messages and logs.
const char* capability_name(Capability c);

enum class MemoryKind { device, host };  // host: pinned, reachable by the device's copy engine

// Owning, device-tagged allocation. Move-only; frees itself through its device.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device* device, MemoryKind kind, void* data, int64_t bytes)
      : device_(device), kind_(kind), data_(data), bytes_(bytes) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reset();  // frees now; the caller guarantees no stream still uses it
  void* data() const { return data_; }
  float* f32() const { return static_cast<float*>(data_); }
  bf16_t* bf16() const { return static_cast<bf16_t*>(data_); }
  int32_t* i32() const { return static_cast<int32_t*>(data_); }
  int64_t bytes() const { return bytes_; }
  Device* device() const { return device_; }
  MemoryKind kind() const { return kind_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  Device* device_ = nullptr;
  MemoryKind kind_ = MemoryKind::device;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// In-order work queue. Destroying a stream waits for the work already enqueued on it.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual const std::string& name() const = 0;
  virtual void synchronize() = 0;  // host blocks until everything enqueued so far has run
};

// A point in a stream's work. record() marks "everything enqueued on s so far"; wait() makes
// another stream hold until that point has run; query()/synchronize() ask from the host.
// An event never recorded counts as complete. An event (like a buffer) must outlive the stream
// work that records or waits on it: destroy it only after synchronising those streams.
class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream& s) = 0;
  virtual void wait(Stream& s) = 0;
  virtual bool query() = 0;
  virtual void synchronize() = 0;
};

struct MemoryStats {
  int64_t device_in_use = 0;
  int64_t device_peak = 0;
  int64_t device_budget = 0;  // 0: no budget
  int64_t device_total = 0;   // the device's own memory (a GPU's); 0: its memory is the host's
  int64_t host_in_use = 0;
  int64_t host_peak = 0;
};

// How matmul reads its operands and writes its output (Device::matmul).
struct MatmulOpts {
  bool trans_a = false;     // a is stored (K, M)
  bool trans_b = false;     // b is stored (N, K)
  bool accumulate = false;  // out += op(a) @ op(b) instead of out =
};

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;

  // ---- optional slots (Note [Optional device capabilities]) ----------------------------------
  // Whether this device implements capability c's slots. Default: false for every capability.
  virtual bool supports(Capability c) const;
  // What an optional slot this device lacks returns: unavailable, "the <name> device does not
  // support <capability> (<slots>)". Callers that asked supports() first may return it too.
  Status unsupported(Capability c) const;

  // ---- memory -----------------------------------------------------------------------------
  // Device memory, counted against the device budget; out_of_memory names the budget.
  virtual Result<Buffer> alloc(int64_t bytes) = 0;
  // Pinned host memory for staging copies (4 KiB aligned, usable with O_DIRECT).
  virtual Result<Buffer> alloc_host(int64_t bytes) = 0;
  // (optional, Capability::host_registration) Make memory the caller allocated (the storage
  // engine's I/O buffers) reachable by the copy engine, so that storage -> host -> device needs
  // no bounce copy: cudaHostRegister on CUDA; on the CPU, whose copies are memcpy within one
  // memory, it is correct to do nothing, so the CPU supports it as a no-op. p and bytes must stay
  // as given until unregister_host_memory(p), which must come before the memory is freed.
  // Synchronous: both return once the registration has taken effect (or failed).
  virtual Status register_host_memory(void* p, int64_t bytes);
  virtual Status unregister_host_memory(void* p);
  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak_memory() = 0;
  virtual void free_buffer(Buffer& b) = 0;  // called by Buffer::reset

  // ---- streams, events ----------------------------------------------------------------------
  virtual std::unique_ptr<Stream> create_stream(const std::string& name) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  // (optional, Capability::host_callbacks) Enqueue fn to run on the host in s's order
  // (cudaLaunchHostFunc on CUDA, the stream's worker thread on the CPU). Asynchronous: ok means
  // fn is enqueued, not that it has run. Without the capability fn is dropped unrun.
  virtual Status launch_host_func(Stream& s, std::function<void()> fn);

  // ---- copies ---------------------------------------------------------------------------------
  // Any of host->device, device->host, device->device; ordered on s.
  virtual void copy(Stream& s, void* dst, const void* src, int64_t bytes) = 0;
  virtual void fill_zero(Stream& s, void* dst, int64_t bytes) = 0;

  // ---- ops (shapes row-major; see Note [Backward accumulates]) ---------------------------------
  // out (M,N) = op(a) @ op(b) [+ bias (N)] [+ out if accumulate]
  // a: (M,K), or (K,M) when trans_a.  b: (K,N), or (N,K) when trans_b.  bias may be null.
  // Call sites name what they set: {.trans_b = true}, {.trans_a = true, .accumulate = true}.
  virtual void matmul(Stream& s, float* out, const float* a, const float* b, const float* bias,
                      int64_t M, int64_t N, int64_t K, MatmulOpts o) = 0;
  // (optional, Capability::bf16_matmul) matmul with bf16 a and b: products and sums in f32, out
  // and bias f32. The CPU widens a and b to f32 and runs matmul; CUDA runs bf16 tensor-core
  // GEMMs. Enqueued on s like matmul; the Status says only whether the backend has it.
  virtual Status matmul_bf16(Stream& s, float* out, const bf16_t* a, const bf16_t* b,
                             const float* bias, int64_t M, int64_t N, int64_t K, MatmulOpts o);
  // dbias (N) += sum over rows of dout (M,N)
  virtual void bias_backward(Stream& s, float* dbias, const float* dout, int64_t M, int64_t N) = 0;
  // out (N,C), mean (N), rstd (N) <- inp (N,C), weight (C), bias (C); eps = 1e-5
  virtual void layernorm_forward(Stream& s, float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int64_t N, int64_t C) = 0;
  // dinp (N,C) +=, dweight (C) +=, dbias (C) +=; dweight and dbias both null: a frozen norm
  // (Note [LoRA] in model/lora.h), only dinp
  virtual void layernorm_backward(Stream& s, float* dinp, float* dweight, float* dbias,
                                  const float* dout, const float* inp, const float* weight,
                                  const float* mean, const float* rstd, int64_t N, int64_t C) = 0;
  // GELU, tanh approximation (GPT-2): out (n) <- inp (n); dinp (n) += gelu'(inp) * dout
  virtual void gelu_forward(Stream& s, float* out, const float* inp, int64_t n) = 0;
  virtual void gelu_backward(Stream& s, float* dinp, const float* inp, const float* dout,
                             int64_t n) = 0;
  // Causal multi-head self-attention, head size hs = C/NH, scale 1/sqrt(hs).
  // qkv (B,T,3C) holds q | k | v per token; out (B,T,C). att receives what the backend saves for
  // the backward, attention_saved_floats() floats: the CPU keeps the softmax probabilities
  // (B,NH,T,T), zero above the diagonal; a fused GPU kernel keeps only per-row statistics and
  // recomputes the rest. Callers treat it as opaque.
  virtual void attention_forward(Stream& s, float* out, float* att, const float* qkv, int64_t B,
                                 int64_t T, int64_t C, int64_t NH) = 0;
  // dqkv (B,T,3C) +=; scratch (attention_scratch_floats) is overwritten
  virtual void attention_backward(Stream& s, float* dqkv, float* scratch, const float* dout,
                                  const float* qkv, const float* att, int64_t B, int64_t T,
                                  int64_t C, int64_t NH) = 0;
  // Sizes, in floats, of attention_forward's saved state and attention_backward's scratch.
  virtual int64_t attention_saved_floats(int64_t B, int64_t T, int64_t NH) const = 0;
  virtual int64_t attention_scratch_floats(int64_t B, int64_t T, int64_t NH) const = 0;
  // losses (N), probs (N,V) <- logits (N,V), targets (N); a kIgnoreTarget row's loss is 0 and
  // the backward leaves its dlogits row as it is (Note [Ignored targets] in core/targets.h)
  virtual void softmax_cross_entropy_forward(Stream& s, float* losses, float* probs,
                                             const float* logits, const int32_t* targets, int64_t N,
                                             int64_t V) = 0;
  // dlogits (N,V) += (probs - onehot(targets)) * dloss
  virtual void softmax_cross_entropy_backward(Stream& s, float* dlogits, const float* probs,
                                              const int32_t* targets, float dloss, int64_t N,
                                              int64_t V) = 0;
  // out (B,T,C) = wte[tokens] (V,C) + wpe[t] (maxT,C). wpe may be null (Llama: no learned
  // positions): then out = wte[tokens] exactly.
  virtual void embedding_forward(Stream& s, float* out, const int32_t* tokens, const float* wte,
                                 const float* wpe, int64_t B, int64_t T, int64_t C) = 0;
  // dwte (V,C) +=, dwpe (maxT,C) += from dout (B,T,C). dwpe may be null: only dwte is updated.
  virtual void embedding_backward(Stream& s, float* dwte, float* dwpe, const float* dout,
                                  const int32_t* tokens, int64_t B, int64_t T, int64_t C) = 0;
  // y (rows, cols at stride ldy) = [y +] alpha * x (rows, cols at stride ldx): one column range
  // of a wider matrix, e.g. a LoRA adapter's rows of a fused q|k|v output (Note [LoRA] in
  // model/lora.h). With accumulate, y + alpha * x rounded twice, as scaled_add.
  virtual void scaled_copy_2d(Stream& s, float* y, int64_t ldy, const float* x, int64_t ldx,
                              int64_t rows, int64_t cols, float alpha, bool accumulate) = 0;
  // out (n) = [out +] mask(inp): element i kept (times m.scale) or 0 by dropout_keeps(m, i)
  // (core/dropout_mask.h); the same bits on every device. LoRA's adapter dropout.
  virtual void dropout_apply(Stream& s, float* out, const float* inp, int64_t n,
                             const DropoutMask& m, bool accumulate) = 0;
  // out (n) = a + b   (residual)
  virtual void add(Stream& s, float* out, const float* a, const float* b, int64_t n) = 0;
  // y (n) += alpha * x
  virtual void scaled_add(Stream& s, float* y, const float* x, float alpha, int64_t n) = 0;
  virtual void convert_f32_to_bf16(Stream& s, bf16_t* out, const float* inp, int64_t n) = 0;
  virtual void convert_bf16_to_f32(Stream& s, float* out, const bf16_t* inp, int64_t n) = 0;
  // out[0] = sum of x[i]^2, accumulated in double in a fixed order
  virtual void sum_squares(Stream& s, double* out, const float* x, int64_t n) = 0;

  // ---- Llama blocks: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention ---------------
  // RMSNorm (Llama): rstd (N) = 1 / sqrt(mean over C of inp^2 + eps); out (N,C) = inp * rstd *
  // weight. As PyTorch's f32 `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight`:
  // each square rounded to f32, the squares summed in f32 in index order c = 0, 1, ..., C-1 (the
  // CPU; a backend may sum in another fixed order, CUDA does), the sum divided by C, then
  // 1.0f / sqrtf (IEEE, as PyTorch's CPU rsqrt) and (inp * rstd) * weight, each rounded.
  virtual void rmsnorm_forward(Stream& s, float* out, float* rstd, const float* inp,
                               const float* weight, int64_t N, int64_t C, float eps) = 0;
  // dinp (N,C) +=, dweight (C) +=  (dweight summed over rows in a fixed order; null: frozen)
  virtual void rmsnorm_backward(Stream& s, float* dinp, float* dweight, const float* dout,
                                const float* inp, const float* weight, const float* rstd, int64_t N,
                                int64_t C) = 0;
  // Rotary position embedding, Hugging Face Llama's rotate-half convention. inp and out are
  // (B, T, row); in each row the first n_rot_heads heads of hs floats are rotated, the rest of
  // the row is copied unchanged. For head vector x, i < hs/2, position t:
  //   c = rope[(t * hs/2 + i) * 2], s = rope[(t * hs/2 + i) * 2 + 1]
  //   out[i] = x[i] * c - x[i + hs/2] * s;   out[i + hs/2] = x[i + hs/2] * c + x[i] * s
  // rope: (>= T, hs/2, 2) cos/sin table on the device (built by the caller). hs is even,
  // n_rot_heads * hs <= row. Products and sums each rounded (no fused multiply-add), so every
  // backend gives the same bits. out may be inp (rotated in place).
  virtual void rope_forward(Stream& s, float* out, const float* inp, const float* rope, int64_t B,
                            int64_t T, int64_t row, int64_t n_rot_heads, int64_t hs) = 0;
  // dinp (B,T,row) += the transpose rotation of dout on the rotated heads, += dout elsewhere:
  //   dinp[i] += dout[i] * c + dout[i + hs/2] * s
  //   dinp[i + hs/2] += dout[i + hs/2] * c - dout[i] * s
  virtual void rope_backward(Stream& s, float* dinp, const float* dout, const float* rope,
                             int64_t B, int64_t T, int64_t row, int64_t n_rot_heads,
                             int64_t hs) = 0;
  // SwiGLU: gu (N, 2F) holds gate | up per row; out (N,F) = silu(gate) * up,
  // silu(x) = x / (1 + exp(-x)) (each step rounded; exp within a few ulp, backend's own exp).
  virtual void swiglu_forward(Stream& s, float* out, const float* gu, int64_t N, int64_t F) = 0;
  // dgu (N, 2F) += (d gate | d up) from dout (N,F):
  //   d gate = dout * up * silu'(gate),  silu'(x) = sig * (1 + x * (1 - sig)), sig = 1/(1+e^-x)
  //   d up   = dout * silu(gate)
  virtual void swiglu_backward(Stream& s, float* dgu, const float* gu, const float* dout, int64_t N,
                               int64_t F) = 0;
  // Grouped-query attention through the multi-head kernel: inp (B,T,(NH + 2*NKV)*hs) holds
  // q | k | v per token (NH query heads, NKV key/value heads); out (B,T,3*NH*hs) holds q | k' | v'
  // where k' and v' repeat each kv head NH/NKV times: query head h reads kv head h / (NH/NKV)
  // (Hugging Face's repeat_kv / repeat_interleave order). NH % NKV == 0.
  virtual void repeat_kv_forward(Stream& s, float* out, const float* inp, int64_t B, int64_t T,
                                 int64_t NH, int64_t NKV, int64_t hs) = 0;
  // dinp (B,T,(NH+2NKV)*hs) += dout's q part, and for k and v the sum of the NH/NKV repeats in
  // repeat order (fixed order: deterministic): sum = 0, sum += repeat 0, 1, ...; dinp += sum.
  // Every backend gives the same bits.
  virtual void repeat_kv_backward(Stream& s, float* dinp, const float* dout, int64_t B, int64_t T,
                                  int64_t NH, int64_t NKV, int64_t hs) = 0;

  // ---- sampling -------------------------------------------------------------------------------
  // Attention of one new query against a key/value cache (KV-cached sampling): q (NH*hs) is the
  // newest position's query heads; kv (T, 2*NKV*hs) holds, for each of the T cached positions
  // (the newest included, so T >= 1), its NKV key heads then its NKV value heads; out (NH*hs)
  // receives, per query head h, softmax(q_h . k_t / sqrt(hs) over t < T) weighted sum of v_t,
  // reading key/value head h / (NH/NKV) (Hugging Face's repeat_kv order; NH % NKV == 0).
  // scratch (NH*T) is overwritten. Every cached position is attended: the cache holds only the
  // past and the present, so there is no mask.
  virtual void attention_decode(Stream& s, float* out, float* scratch, const float* q,
                                const float* kv, int64_t T, int64_t NH, int64_t NKV,
                                int64_t hs) = 0;

  // ---- optimizer ------------------------------------------------------------------------------
  // (optional, Capability::device_adamw) AdamW on device-resident state, bit-identical to
  // adamw_step_ref (cpu/kernels_adamw.h, Note [AdamW operation order]): param, m, v (n) updated
  // in place, grad (n) read, param_bf16 (n) written when not null. Enqueued on s like any op; the
  // Status says only whether the backend has it. The CPU device lacks it: there the host
  // adamw_step (cpu/kernels_adamw.h) already is this computation, without a stream. The discrete
  // CPU device has it (that host code on its stream).
  virtual Status adamw_step(Stream& s, float* param, float* m, float* v, bf16_t* param_bf16,
                            const float* grad, int64_t n, const AdamWHyper& h);

  // ---- quantized weights (QLoRA; Note [Quantized tensor format] in backend/quant.h) ----------
  // out (n) <- quantized (quantized_bytes(fmt, n) bytes, quant_layout's parts), both device
  // memory: a frozen base's weights made f32 just before their GEMMs. Every backend gives the
  // bits of cpu::ref::dequantize (cpu/kernels_quant.h). Quantizing is the host's, once.
  virtual void dequantize(Stream& s, float* out, const void* quantized, QuantFormat fmt,
                          int64_t n) = 0;
};

struct CpuDeviceOptions {
  int64_t device_budget_bytes = 0;  // 0: unlimited. The arena that stands for GPU memory.
  // The discrete CPU device (DeviceKind::cpu_discrete; Note [The discrete CPU device] in
  // cpu/cpu_device.cpp): ops read device allocations only, host memory moves by copy().
  bool discrete = false;
};
std::unique_ptr<Device> create_cpu_device(const CpuDeviceOptions& options = {});

// Whether d's memory is the host's (the CPU device): its kernels may read host memory in place,
// and host code may step its buffers directly. Every other device (cpu-discrete, cuda) is
// reached only by copies, and the trainers take the discrete path there: saved activations
// through device buffers, AdamW on the device's stream, tasks ordered by events (Note [The
// discrete CPU device] in cpu/cpu_device.cpp, Note [Ordering by events] in
// train/offload_actions.h). The one place that rule is written.
inline bool shares_host_memory(DeviceKind kind) {
  return kind == DeviceKind::cpu;
}
inline bool shares_host_memory(const Device& d) {
  return shares_host_memory(d.kind());
}

// What plans and workspaces need of a device, known from its kind alone, so the planner sizes a
// CUDA run on a machine without a GPU as the trainer will run it. The one place the attention
// footprints are written (the devices' attention_saved_floats / attention_scratch_floats return
// these): the CPU keeps the softmax probabilities (B, NH, T, T) and its backward a matrix of the
// same size; the fused CUDA kernels keep a log-sum-exp per query row (B, NH, T), and as much
// scratch.
struct DeviceTraits {
  bool shares_host_memory = true;  // see shares_host_memory above
  bool fused_attention = false;    // attention keeps per-row statistics, not (T, T) scores
  int64_t attention_saved_floats(int64_t B, int64_t T, int64_t NH) const {
    return fused_attention ? B * NH * T : B * NH * T * T;
  }
  int64_t attention_scratch_floats(int64_t B, int64_t T, int64_t NH) const {
    return attention_saved_floats(B, T, NH);
  }
};
inline DeviceTraits device_traits(DeviceKind kind) {
  return {.shares_host_memory = shares_host_memory(kind),
          .fused_attention = kind == DeviceKind::cuda};
}
inline DeviceTraits device_traits(const Device& d) {
  return device_traits(d.kind());
}

// The CUDA device on GPU `ordinal`. device_budget_bytes caps the device memory Strata holds
// (0: what the GPU has). unavailable, with a one-line reason, when Strata was built without CUDA
// or no usable GPU is present (the CUDA runtime's words: no device, driver too old, ...).
Result<std::unique_ptr<Device>> create_cuda_device(int ordinal = 0,
                                                   int64_t device_budget_bytes = 0);
// How many GPUs the CUDA runtime sees here; 0 without CUDA or without a usable GPU.
int cuda_device_count();

}  // namespace strata
