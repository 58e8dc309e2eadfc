// cuBLASLt GEMMs with the row-major semantics of Device::matmul (backend.h).
//
// Note [Row-major GEMM on cuBLASLt]
// cuBLASLt is column-major. The bytes of a row-major (R,C) matrix are the column-major (C,R)
// matrix, its transpose. So out (M,N) = op(a) @ op(b) is computed as
//   out^T (N,M) = op(b)^T @ op(a)^T
// with cuBLAS's A operand our b, its B operand our a, m = N, n = M, k = K, and each operand's
// transpose flag kept as it is: b (K,N) row-major is (N,K) column-major, which is op(b)^T as
// stored; b given as (N,K) (trans_b) is (K,N) column-major and needs cuBLAS's transpose. The same
// holds for a. The bias (N) runs along cuBLAS's m, which is what CUBLASLT_EPILOGUE_BIAS
// broadcasts over the columns.

// Note [GEMM precision and reproducibility]
// Compute type CUBLAS_COMPUTE_32F everywhere: f32 inputs get f32 multiply-adds (no TF32, so the
// f32 path matches the CPU within NMSE 1e-5), bf16 inputs get tensor-core products accumulated
// in f32. Output, bias and scaling are f32. cuBLASLt returns the same bits for the same algorithm,
// shape, workspace size and GPU; a GemmContext picks an algorithm once per shape and alignment
// and keeps it, so repeated runs on one machine agree bit for bit.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "backend/backend.h"

namespace strata::cuda_backend {

struct GemmShape {
  cudaDataType_t in_type;  // of a and b: CUDA_R_32F or CUDA_R_16BF
  int64_t M, N, K;
  bool trans_a, trans_b;
  bool bias_epilogue;  // bias added by cuBLASLt's epilogue (else the caller adds it)
};

// The cuBLASLt descriptors of one shape (Note [Row-major GEMM on cuBLASLt]).
class GemmDesc {
 public:
  explicit GemmDesc(const GemmShape& shape);
  ~GemmDesc();
  GemmDesc(const GemmDesc&) = delete;
  GemmDesc& operator=(const GemmDesc&) = delete;

  const GemmShape& shape() const { return shape_; }
  // Up to max_algos algorithms, best first by cuBLASLt's heuristics, valid for pointers aligned to
  // `alignment` bytes and the given workspace. Empty when cuBLASLt has none for this shape.
  std::vector<cublasLtMatmulHeuristicResult_t> heuristics(cublasLtHandle_t lt, int max_algos,
                                                          int64_t workspace_bytes,
                                                          int alignment) const;
  // Enqueues out (M,N) = op(a) @ op(b) [+ bias (N)] [+ out when accumulate] on stream. Not
  // thread-safe (it sets the bias pointer on the shared descriptor).
  cublasStatus_t run(cublasLtHandle_t lt, const cublasLtMatmulAlgo_t& algo, float* out,
                     const void* a, const void* b, const float* bias, bool accumulate,
                     void* workspace, int64_t workspace_bytes, cudaStream_t stream);

 private:
  GemmShape shape_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t layout_b_ = nullptr;    // cuBLAS's A: our b
  cublasLtMatrixLayout_t layout_a_ = nullptr;    // cuBLAS's B: our a
  cublasLtMatrixLayout_t layout_out_ = nullptr;  // C and D: out^T, (N,M) column-major
};

// Largest power of two dividing the address, capped at 16 (the widest vector access cuBLASLt's
// kernels ask for).
int pointer_alignment(const void* p);

// Per-stream cuBLASLt state: its own handle, its own workspace (GEMMs on different streams may
// run at once and must not share one), and the algorithm chosen for each shape it has seen.
class GemmContext {
 public:
  // Bytes of workspace a stream asks the pool for (NVIDIA's advice for Hopper; also plenty for
  // Ampere). A stream whose workspace the budget refuses runs with none: slower algorithms, same
  // results contract.
  static constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;

  explicit GemmContext(Buffer workspace);  // workspace may be empty
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  // The Device::matmul / matmul_bf16 contract; in_type says what a and b hold.
  void matmul(cudaStream_t stream, cudaDataType_t in_type, float* out, const void* a, const void* b,
              const float* bias, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
              bool accumulate);

 private:
  struct Plan {
    std::unique_ptr<GemmDesc> desc;  // null: cuBLASLt has no algorithm for this key
    cublasLtMatmulAlgo_t algo;
  };
  // in_type, M, N, K, trans_a, trans_b, bias_epilogue, alignment
  using PlanKey = std::tuple<int, int64_t, int64_t, int64_t, bool, bool, bool, int>;

  Plan& plan_for(const GemmShape& shape, int alignment);

  cublasLtHandle_t lt_ = nullptr;
  Buffer workspace_;
  std::mutex mutex_;  // plans_ and the descriptors' bias pointers
  std::map<PlanKey, Plan> plans_;
};

}  // namespace strata::cuda_backend
