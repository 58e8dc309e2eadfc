// Dequantize on the GPU, bit for bit cpu::ref::dequantize (Note [Quantized tensor format] in
// backend/quant.h, Note [Double quantization] in cpu/kernels_quant.h). Every rounded operation
// is one IEEE intrinsic with round-to-nearest (__fmul_rn, __fdiv_rn, __fadd_rn), which nvcc
// never fuses or approximates, whatever the flags: the one rounding of kNf4Codes[c] * absmax,
// the two of q * absmax / 127, and the rebuilt absmax of nf4_dq, in the CPU's order.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels_quant.cuh"

namespace strata {

namespace {

constexpr int kQuantThreads = 256;
constexpr int64_t kQuantMaxBlocks = 4096;  // grid-stride beyond this: enough to fill any GPU

// The code table travels as a kernel argument: host constexpr data is not device data.
struct Nf4Table {
  float v[16];
};

__device__ float int8_value(int8_t q, float scale) {
  return __fdiv_rn(__fmul_rn(static_cast<float>(q), scale), 127.0f);
}

// Block b's absmax: stored, or rebuilt from the mean and its group's int8 (nf4_dq).
__device__ float block_absmax(const uint8_t* base, const QuantLayout& l, int64_t b) {
  if (l.mean < 0) return reinterpret_cast<const float*>(base + l.absmax)[b];
  const float mean = reinterpret_cast<const float*>(base + l.mean)[0];
  const float scale = reinterpret_cast<const float*>(base + l.scales)[b / kQuantDqGroup];
  return __fadd_rn(int8_value(static_cast<int8_t>(base[l.qabsmax + b]), scale), mean);
}

__global__ void dequantize_kernel(float* out,           // (n)
                                  const uint8_t* base,  // (l.bytes)
                                  QuantLayout l, bool is_int8, Nf4Table table) {
  __shared__ float codes[16];
  if (threadIdx.x < 16) codes[threadIdx.x] = table.v[threadIdx.x];
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < l.n;
       i += stride) {
    const float a = block_absmax(base, l, i / kQuantBlock);
    if (is_int8) {
      out[i] = int8_value(static_cast<int8_t>(base[l.codes + i]), a);
    } else {
      const uint8_t byte = base[l.codes + i / 2];
      out[i] = __fmul_rn(codes[i % 2 == 0 ? byte >> 4 : byte & 0xF], a);
    }
  }
}

}  // namespace

void cuda_dequantize(cudaStream_t stream, float* out, const void* quantized, QuantFormat fmt,
                     int64_t n) {
  if (n == 0) return;
  Nf4Table table;
  for (int c = 0; c < 16; ++c) table.v[c] = kNf4Codes[c];
  const int64_t blocks = (n + kQuantThreads - 1) / kQuantThreads;
  dequantize_kernel<<<static_cast<unsigned>(blocks < kQuantMaxBlocks ? blocks : kQuantMaxBlocks),
                      kQuantThreads, 0, stream>>>(out, static_cast<const uint8_t*>(quantized),
                                                  quant_layout(fmt, n), fmt == QuantFormat::int8,
                                                  table);
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata
