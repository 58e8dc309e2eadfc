// Checks for CUDA runtime and cuBLAS(Lt) calls whose failure means a bug (a bad argument, a
// launch that cannot run, a lost device), never a condition the caller can recover from. They
// stay on in release builds, print file:line, the call and the library's error text, then abort,
// like STRATA_CHECK (core/check.h).
//
// Recoverable failures do not go through these macros: cudaMalloc/cudaHostAlloc running out of
// memory returns Status out_of_memory (cuda_pool.cpp), and "no GPU here" returns unavailable from
// create_cuda_device.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/check.h"

namespace strata::detail {

// One overload per status type, so that one macro checks the runtime's and cuBLASLt's calls.
inline bool cuda_call_ok(cudaError_t err) {
  return err == cudaSuccess;
}
inline bool cuda_call_ok(cublasStatus_t st) {
  return st == CUBLAS_STATUS_SUCCESS;
}

[[noreturn]] inline void cuda_call_failed(const char* file, int line, const char* call,
                                          cudaError_t err) {
  check_failed(file, line, call, cudaGetErrorString(err));
}
[[noreturn]] inline void cuda_call_failed(const char* file, int line, const char* call,
                                          cublasStatus_t st) {
  check_failed(file, line, call, cublasLtGetStatusString(st));
}

}  // namespace strata::detail

// STRATA_CUDA_CHECK(cudaStreamSynchronize(s)); STRATA_CUDA_CHECK(cublasLtMatmul(...));
// `call` returns a cudaError_t or a cublasStatus_t.
#define STRATA_CUDA_CHECK(call)                                                       \
  do {                                                                                \
    const auto strata_cuda_st_ = (call);                                              \
    if (!::strata::detail::cuda_call_ok(strata_cuda_st_))                             \
      ::strata::detail::cuda_call_failed(__FILE__, __LINE__, #call, strata_cuda_st_); \
  } while (0)

// After a kernel launch (<<<...>>>): reports a bad launch configuration at the launch site,
// without synchronizing. It reads cudaGetLastError, so code that tolerates a failed runtime call
// (an out-of-memory cudaMalloc, a refused cudaHostRegister) must clear it with cudaGetLastError
// before going on, or the next launch check reports that stale error.
#define STRATA_CUDA_LAUNCH_CHECK() STRATA_CUDA_CHECK(cudaGetLastError())
