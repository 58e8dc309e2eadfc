#include "backend/cuda/cuda_gemm.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device_kernels.cuh"

namespace strata::cuda_backend {

namespace {

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value));
}

template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
              const T& value) {
  STRATA_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value));
}

std::string describe(const GemmShape& s) {
  char buf[192];
  std::snprintf(buf, sizeof buf, "%s GEMM M=%lld N=%lld K=%lld trans_a=%d trans_b=%d bias=%d",
                s.in_type == CUDA_R_16BF ? "bf16" : "f32", static_cast<long long>(s.M),
                static_cast<long long>(s.N), static_cast<long long>(s.K), s.trans_a, s.trans_b,
                s.bias_epilogue);
  return buf;
}

}  // namespace

int pointer_alignment(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  int align = 16;
  while (align > 1 && addr % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

// ---- GemmDesc -----------------------------------------------------------------------------------

GemmDesc::GemmDesc(const GemmShape& shape) : shape_(shape) {
  const auto [in_type, M, N, K, trans_a, trans_b, bias_epilogue] = shape;
  STRATA_CUDA_CHECK(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // cuBLAS's A is our b, its B our a (Note [Row-major GEMM on cuBLASLt]).
  set_desc(op_, CUBLASLT_MATMUL_DESC_TRANSA, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(op_, CUBLASLT_MATMUL_DESC_TRANSB, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (bias_epilogue) {
    set_desc(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_desc(op_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_32F));
  }
  const auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  // b: (K,N) row-major = (N,K) column-major, ld N; trans_b: (N,K) row-major = (K,N), ld K.
  STRATA_CUDA_CHECK(trans_b ? cublasLtMatrixLayoutCreate(&layout_b_, in_type, u(K), u(N), K)
                            : cublasLtMatrixLayoutCreate(&layout_b_, in_type, u(N), u(K), N));
  // a: (M,K) row-major = (K,M) column-major, ld K; trans_a: (K,M) row-major = (M,K), ld M.
  STRATA_CUDA_CHECK(trans_a ? cublasLtMatrixLayoutCreate(&layout_a_, in_type, u(M), u(K), M)
                            : cublasLtMatrixLayoutCreate(&layout_a_, in_type, u(K), u(M), K));
  // out: (M,N) row-major = (N,M) column-major, ld N.
  STRATA_CUDA_CHECK(cublasLtMatrixLayoutCreate(&layout_out_, CUDA_R_32F, u(N), u(M), N));
}

GemmDesc::~GemmDesc() {
  // Destroy calls only free host memory; their status carries nothing to act on.
  (void)cublasLtMatrixLayoutDestroy(layout_out_);
  (void)cublasLtMatrixLayoutDestroy(layout_a_);
  (void)cublasLtMatrixLayoutDestroy(layout_b_);
  (void)cublasLtMatmulDescDestroy(op_);
}

std::vector<cublasLtMatmulHeuristicResult_t> GemmDesc::heuristics(cublasLtHandle_t lt,
                                                                  int max_algos,
                                                                  int64_t workspace_bytes,
                                                                  int alignment) const {
  cublasLtMatmulPreference_t pref = nullptr;
  STRATA_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace_bytes));
  const auto align = static_cast<uint32_t>(alignment);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align);

  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(max_algos));
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt, op_, layout_b_, layout_a_, layout_out_, layout_out_, pref,
                                     max_algos, results.data(), &found);
  (void)cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED: no algorithm for this combination, which the caller handles.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return {};
  STRATA_CUDA_CHECK(st);
  results.resize(static_cast<size_t>(found));
  std::erase_if(results, [](const auto& r) { return r.state != CUBLAS_STATUS_SUCCESS; });
  return results;
}

cublasStatus_t GemmDesc::run(cublasLtHandle_t lt, const cublasLtMatmulAlgo_t& algo, float* out,
                             const void* a, const void* b, const float* bias, bool accumulate,
                             void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  if (shape_.bias_epilogue) set_desc(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  // Host scalars (the default pointer mode): read when the call is enqueued.
  const float alpha = 1.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  return cublasLtMatmul(lt, op_, &alpha, b, layout_b_, a, layout_a_, &beta, out, layout_out_, out,
                        layout_out_, &algo, workspace, static_cast<size_t>(workspace_bytes),
                        stream);
}

// ---- GemmContext --------------------------------------------------------------------------------

GemmContext::GemmContext(Buffer workspace) : workspace_(std::move(workspace)) {
  STRATA_CUDA_CHECK(cublasLtCreate(&lt_));
}

GemmContext::~GemmContext() {
  plans_.clear();
  (void)cublasLtDestroy(lt_);
}

GemmContext::Plan& GemmContext::plan_for(const GemmShape& shape, int alignment) {
  const PlanKey key{static_cast<int>(shape.in_type),
                    shape.M,
                    shape.N,
                    shape.K,
                    shape.trans_a,
                    shape.trans_b,
                    shape.bias_epilogue,
                    alignment};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan plan;
  plan.desc = std::make_unique<GemmDesc>(shape);
  const auto found = plan.desc->heuristics(lt_, 1, workspace_.bytes(), alignment);
  if (found.empty()) {
    plan.desc.reset();
  } else {
    plan.algo = found[0].algo;
  }
  return plans_.emplace(key, std::move(plan)).first->second;
}

void GemmContext::matmul(cudaStream_t stream, cudaDataType_t in_type, float* out, const void* a,
                         const void* b, const float* bias, int64_t M, int64_t N, int64_t K,
                         bool trans_a, bool trans_b, bool accumulate) {
  STRATA_CHECK(M >= 0 && N >= 0 && K >= 0);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: out = [out +] bias. cuBLASLt rejects k = 0 layouts.
    if (!accumulate) {
      STRATA_CUDA_CHECK(
          cudaMemsetAsync(out, 0, static_cast<size_t>(M * N) * sizeof(float), stream));
    }
    if (bias != nullptr) cuda_add_row_bias(stream, out, bias, M, N);
    return;
  }
  int alignment = std::min({pointer_alignment(out), pointer_alignment(a), pointer_alignment(b)});
  if (bias != nullptr) alignment = std::min(alignment, pointer_alignment(bias));

  GemmShape shape{in_type, M, N, K, trans_a, trans_b, bias != nullptr};
  std::lock_guard<std::mutex> lock(mutex_);
  Plan* plan = &plan_for(shape, alignment);
  if (plan->desc == nullptr && shape.bias_epilogue) {
    shape.bias_epilogue = false;  // no fused-bias algorithm: a plain GEMM, then the bias kernel
    plan = &plan_for(shape, alignment);
  }
  if (plan->desc == nullptr) {
    detail::check_failed(__FILE__, __LINE__, "cuBLASLt algorithm",
                         ("cuBLASLt has no algorithm for " + describe(shape)).c_str());
  }
  cublasStatus_t st = plan->desc->run(lt_, plan->algo, out, a, b, bias, accumulate,
                                      workspace_.data(), workspace_.bytes(), stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED && shape.bias_epilogue) {
    // The epilogue refused this bias pointer: remember that for the key and take the plain path.
    plan->desc.reset();
    shape.bias_epilogue = false;
    plan = &plan_for(shape, alignment);
    if (plan->desc != nullptr) {
      st = plan->desc->run(lt_, plan->algo, out, a, b, nullptr, accumulate, workspace_.data(),
                           workspace_.bytes(), stream);
    }
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    detail::check_failed(__FILE__, __LINE__, "cublasLtMatmul",
                         (describe(shape) + ": " + cublasLtGetStatusString(st)).c_str());
  }
  if (bias != nullptr && !shape.bias_epilogue) cuda_add_row_bias(stream, out, bias, M, N);
}

}  // namespace strata::cuda_backend
