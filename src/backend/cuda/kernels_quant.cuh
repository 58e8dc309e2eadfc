// The launcher of the dequantize op (Device::dequantize; Note [Quantized tensor format] in
// backend/quant.h). Same conventions as kernels.cuh: enqueue on `stream` only, outputs first,
// then inputs, then sizes. Bit for bit cpu::ref::dequantize (cpu/kernels_quant.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/quant.h"

namespace strata {

void cuda_dequantize(cudaStream_t stream,
                     float* out,             // (n)
                     const void* quantized,  // (quantized_bytes(fmt, n)) quant_layout's parts
                     QuantFormat fmt, int64_t n);

}  // namespace strata
