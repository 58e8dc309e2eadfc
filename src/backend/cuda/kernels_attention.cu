// Fused causal multi-head attention in f32 that never materializes a T x T matrix.
//
// Note [Fused attention: algorithm and shapes]
// qkv (B,T,3C): for head h, q_t = qkv[b,t, h*hs ..], k_t = qkv[b,t, C + h*hs ..],
// v_t = qkv[b,t, 2C + h*hs ..]; out and dout (B,T,C), head h in columns h*hs ..;
// scale = 1/sqrt(hs); s_ij = scale * q_i . k_j, visible when j <= i.
//   att     (B,NH,T) saved by the forward: lse_i = log sum_{j<=i} exp(s_ij)
//   scratch (B,NH,T) written by the backward: D_i = sum_j P_ij dP_ij = dO_i . O_i
// With P_ij = exp(s_ij - lse_i) and dP_ij = dO_i . v_j, the backward is
//   dS_ij = P_ij (dP_ij - D_i);  dq_i += scale sum_j dS_ij k_j;
//   dk_j += scale sum_i dS_ij q_i;  dv_j += sum_i P_ij dO_i
// (cpu::ref::attention_backward with datt = dP, and D = sum_j p[j] datt[j]).
//
// Tiling. A block of 256 threads owns kOwn = 64 rows of one (b, h) and streams tiles of
// kStream = 32 rows of the other operand through shared memory, so memory is O(T) per head:
//   forward   owns 64 queries, streams key/value tiles 0 .. the diagonal; online softmax
//             (running max m_i and sum l_i, O rescaled by exp(m_old - m_new) per tile).
//   D pass    the forward kernel again, recomputing O, writing D_i = dO_i . O_i instead of
//             out and lse. O is not an input of attention_backward, and this costs one forward.
//   dq        owns 64 queries, streams key tiles 0 .. the diagonal: S, P from lse, dP, dS, dq.
//   dk, dv    owns 64 keys, streams query tiles from the diagonal to T-1: S^T, P^T, dP^T, dS^T.
// Note [Deterministic attention backward]: every dq, dk, dv element is accumulated in
// registers by the one thread that owns it, over the streamed tiles in increasing order, and
// added to dqkv once at the end: no atomics, no split over blocks, the same bits on every run.
// The price is that S and dP are computed twice (dq and dk/dv kernels) plus the D pass.
//
// Inside a block the 256 threads form a 16 x 16 grid (tx = threadIdx.x % 16, ty = / 16); a
// thread computes rows ty + 16a of a product and columns tx + 16b, so a row's 16 threads are one
// half-warp and row reductions are xor shuffles within it. The products read shared-memory
// tiles whose row length is padded to an odd number of floats (HS + 1, kStream + 1): the 16
// rows one half-warp reads at the same column then fall in 16 different banks.
//
// Head sizes: the kernels are instantiated for padded widths HS in {16, 32, 64, 80, 96, 128};
// a head of size hs runs the smallest HS >= hs with columns hs .. HS-1 loaded as zeros (they add
// nothing to any dot product and are never written back). Rows >= T are zeros as well and
// masked out. Shared memory per block (floats): forward 128 (HS+1) + 64*33; dq 192 (HS+1) +
// 64*33; dk/dv 192 (HS+1) + 2*64*33 + 64, i.e. 113.5 KiB at HS = 128 (opt-in above 48 KiB).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda/kernels.cuh"
#include "backend/cuda/kernels_common.cuh"
#include "core/check.h"

namespace strata {

namespace {

using kernels_detail::group_max;
using kernels_detail::group_sum;

constexpr int kThreads = 256;                   // a 16 x 16 thread grid
constexpr int kOwn = 64;                        // rows a block owns
constexpr int kStream = 32;                     // rows per streamed tile
constexpr int kOwnPerThread = kOwn / 16;        // owned rows per thread: ty + 16a
constexpr int kStreamPerThread = kStream / 16;  // streamed columns per thread: tx + 16b
constexpr int kLdS = kStream + 1;               // padded row length of (kOwn, kStream) tiles
constexpr int kMaxHeadSize = 128;

// Where one (b, h) lives. Row strides: 3C in qkv and dqkv, C in out and dout.
struct HeadView {
  int64_t T, C;
  int64_t qkv_offset;   // (b*T) * 3C + h*hs: element (t, d) of q is qkv[qkv_offset + t*3C + d]
  int64_t out_offset;   // (b*T) * C + h*hs
  int64_t stat_offset;  // (b*NH + h) * T: row t of lse / D
  int hs;
};

__device__ HeadView head_view(int64_t T, int64_t C, int64_t NH, int hs) {
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / NH, h = bh % NH;
  return HeadView{T, C, b * T * 3 * C + h * hs, b * T * C + h * hs, bh * T, hs};
}

// tile (kRows, HS+1) <- rows row0 .. row0+kRows of a (T, hs) slice whose row t starts at
// src + t*ld; rows >= T and columns >= hs become 0.
template <int HS, int kRows>
__device__ void load_tile(float* __restrict__ tile, const float* __restrict__ src, int64_t ld,
                          int64_t row0, int64_t T, int hs) {
  for (int e = threadIdx.x; e < kRows * HS; e += kThreads) {
    const int r = e / HS, d = e % HS;
    const int64_t row = row0 + r;
    tile[r * (HS + 1) + d] = row < T && d < hs ? src[row * ld + d] : 0.0f;
  }
}

// acc[a][b] += sum_k A[ty+16a][k] * Bt[tx+16b][k]   (A Bt^T; A and Bt in shared memory)
template <int RA, int RB, int K>
__device__ __forceinline__ void gemm_abt(float (&acc)[RA][RB], const float* A, int lda,
                                         const float* Bt, int ldb) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll 8
  for (int k = 0; k < K; k++) {
    float a[RA], b[RB];
#pragma unroll
    for (int i = 0; i < RA; i++) a[i] = A[(ty + 16 * i) * lda + k];
#pragma unroll
    for (int j = 0; j < RB; j++) b[j] = Bt[(tx + 16 * j) * ldb + k];
#pragma unroll
    for (int i = 0; i < RA; i++) {
#pragma unroll
      for (int j = 0; j < RB; j++) acc[i][j] += a[i] * b[j];
    }
  }
}

// acc[a][m] += sum_k A[ty+16a][k] * Bm[k][tx+16m]   (A Bm; A and Bm in shared memory)
template <int RA, int RM, int K>
__device__ __forceinline__ void gemm_ab(float (&acc)[RA][RM], const float* A, int lda,
                                        const float* Bm, int ldb) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll 8
  for (int k = 0; k < K; k++) {
    float a[RA], b[RM];
#pragma unroll
    for (int i = 0; i < RA; i++) a[i] = A[(ty + 16 * i) * lda + k];
#pragma unroll
    for (int m = 0; m < RM; m++) b[m] = Bm[k * ldb + tx + 16 * m];
#pragma unroll
    for (int i = 0; i < RA; i++) {
#pragma unroll
      for (int m = 0; m < RM; m++) acc[i][m] += a[i] * b[m];
    }
  }
}

template <int HS>
constexpr int forward_smem_floats() {
  return (kOwn + 2 * kStream) * (HS + 1) + kOwn * kLdS;
}
template <int HS>
constexpr int backward_dq_smem_floats() {
  return (2 * kOwn + 2 * kStream) * (HS + 1) + kOwn * kLdS;
}
template <int HS>
constexpr int backward_dkdv_smem_floats() {
  return (2 * kOwn + 2 * kStream) * (HS + 1) + 2 * kStream + 2 * kOwn * kLdS;
}

// ---- forward (and the backward's D pass) ------------------------------------------------------
// Block (bh, y) owns queries q0 .. q0+63 with q0 = 64 * (gridDim.y - 1 - y): the longest rows
// (most key tiles) are scheduled first. kDelta = false: writes out and lse. kDelta = true:
// writes only delta_i = dout_i . O_i (the D pass of the backward).
template <int HS, bool kDelta>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(float* __restrict__ out,         // (B,T,C), or unused
                             float* __restrict__ lse,         // (B,NH,T), or unused
                             float* __restrict__ delta,       // (B,NH,T) when kDelta
                             const float* __restrict__ qkv,   // (B,T,3C)
                             const float* __restrict__ dout,  // (B,T,C) when kDelta
                             int64_t T, int64_t C, int64_t NH, int hs, float scale) {
  constexpr int kLdH = HS + 1;
  constexpr int kCols = HS / 16;  // output columns per thread: tx + 16d
  extern __shared__ float smem[];
  float* q_s = smem;                  // (kOwn, kLdH)    queries, for the whole kernel
  float* k_s = q_s + kOwn * kLdH;     // (kStream, kLdH) current key tile
  float* v_s = k_s + kStream * kLdH;  // (kStream, kLdH) current value tile
  float* p_s = v_s + kStream * kLdH;  // (kOwn, kLdS)    unnormalized probabilities of the tile

  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const HeadView hv = head_view(T, C, NH, hs);
  const int64_t ld = 3 * C;
  const float* q_g = qkv + hv.qkv_offset;
  const int64_t q0 = static_cast<int64_t>(gridDim.y - 1 - blockIdx.y) * kOwn;
  load_tile<HS, kOwn>(q_s, q_g, ld, q0, T, hs);

  float o[kOwnPerThread][kCols] = {};  // unnormalized output rows ty + 16a
  float m[kOwnPerThread];              // running max of the scaled scores
  float l[kOwnPerThread] = {};         // running sum of exp(s - m), over this thread's columns
#pragma unroll
  for (int a = 0; a < kOwnPerThread; a++) m[a] = -INFINITY;

  const int64_t last_row = (q0 + kOwn < T ? q0 + kOwn : T) - 1;
  const int64_t num_tiles = last_row / kStream + 1;  // key tiles up to the diagonal
  for (int64_t tile = 0; tile < num_tiles; tile++) {
    const int64_t k0 = tile * kStream;
    __syncthreads();  // the previous tile's k_s, v_s, p_s are no longer read
    load_tile<HS, kStream>(k_s, q_g + C, ld, k0, T, hs);
    load_tile<HS, kStream>(v_s, q_g + 2 * C, ld, k0, T, hs);
    __syncthreads();

    float s[kOwnPerThread][kStreamPerThread] = {};
    gemm_abt<kOwnPerThread, kStreamPerThread, HS>(s, q_s, kLdH, k_s, kLdH);
#pragma unroll
    for (int a = 0; a < kOwnPerThread; a++) {
      const int64_t row = q0 + ty + 16 * a;
      float tile_max = -INFINITY;
#pragma unroll
      for (int b = 0; b < kStreamPerThread; b++) {
        const int64_t col = k0 + tx + 16 * b;
        s[a][b] = col <= row && col < T ? s[a][b] * scale : -INFINITY;  // causal mask
        tile_max = fmaxf(tile_max, s[a][b]);
      }
      // Finite from the first tile on: key 0 is visible to every row (rows >= T included).
      const float m_new = fmaxf(m[a], group_max<16>(tile_max));
      const float alpha = expf(m[a] - m_new);  // 0 on the first tile (m = -inf)
      l[a] *= alpha;
#pragma unroll
      for (int d = 0; d < kCols; d++) o[a][d] *= alpha;
#pragma unroll
      for (int b = 0; b < kStreamPerThread; b++) {
        const float p = expf(s[a][b] - m_new);  // masked: exp(-inf) = 0
        l[a] += p;
        p_s[(ty + 16 * a) * kLdS + tx + 16 * b] = p;
      }
      m[a] = m_new;
    }
    __syncthreads();  // p_s complete
    gemm_ab<kOwnPerThread, kCols, kStream>(o, p_s, kLdS, v_s, kLdH);
  }

  // Shuffles below run on all lanes; only the stores depend on row < T.
#pragma unroll
  for (int a = 0; a < kOwnPerThread; a++) {
    const int64_t row = q0 + ty + 16 * a;
    const float l_row = group_sum<float, 16>(l[a]);
    const float inv = 1.0f / l_row;
    if constexpr (!kDelta) {
      if (row < T) {
        float* o_g = out + hv.out_offset + row * C;
#pragma unroll
        for (int d = 0; d < kCols; d++) {
          if (tx + 16 * d < hs) o_g[tx + 16 * d] = o[a][d] * inv;
        }
        if (tx == 0) lse[hv.stat_offset + row] = m[a] + logf(l_row);
      }
    } else {
      float dot = 0.0f;
      if (row < T) {
        const float* do_g = dout + hv.out_offset + row * C;
#pragma unroll
        for (int d = 0; d < kCols; d++) {
          if (tx + 16 * d < hs) dot += do_g[tx + 16 * d] * (o[a][d] * inv);
        }
      }
      dot = group_sum<float, 16>(dot);
      if (row < T && tx == 0) delta[hv.stat_offset + row] = dot;
    }
  }
}

// ---- backward: dq -------------------------------------------------------------------------------
// Block (bh, y) owns queries q0 .. q0+63 (longest first, as the forward) and streams key tiles
// 0 .. the diagonal in order, accumulating dq in registers.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(float* __restrict__ dqkv,         // (B,T,3C) +=, q third
                                 const float* __restrict__ dout,   // (B,T,C)
                                 const float* __restrict__ qkv,    // (B,T,3C)
                                 const float* __restrict__ lse,    // (B,NH,T)
                                 const float* __restrict__ delta,  // (B,NH,T)
                                 int64_t T, int64_t C, int64_t NH, int hs, float scale) {
  constexpr int kLdH = HS + 1;
  constexpr int kCols = HS / 16;
  extern __shared__ float smem[];
  float* q_s = smem;                   // (kOwn, kLdH)
  float* do_s = q_s + kOwn * kLdH;     // (kOwn, kLdH)
  float* k_s = do_s + kOwn * kLdH;     // (kStream, kLdH)
  float* v_s = k_s + kStream * kLdH;   // (kStream, kLdH)
  float* ds_s = v_s + kStream * kLdH;  // (kOwn, kLdS) dS of the tile

  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const HeadView hv = head_view(T, C, NH, hs);
  const int64_t ld = 3 * C;
  const float* q_g = qkv + hv.qkv_offset;
  const int64_t q0 = static_cast<int64_t>(gridDim.y - 1 - blockIdx.y) * kOwn;
  load_tile<HS, kOwn>(q_s, q_g, ld, q0, T, hs);
  load_tile<HS, kOwn>(do_s, dout + hv.out_offset, C, q0, T, hs);

  float lse_r[kOwnPerThread], d_r[kOwnPerThread];  // per owned row; 0 for rows >= T (masked)
#pragma unroll
  for (int a = 0; a < kOwnPerThread; a++) {
    const int64_t row = q0 + ty + 16 * a;
    lse_r[a] = row < T ? lse[hv.stat_offset + row] : 0.0f;
    d_r[a] = row < T ? delta[hv.stat_offset + row] : 0.0f;
  }

  float dq[kOwnPerThread][kCols] = {};
  const int64_t last_row = (q0 + kOwn < T ? q0 + kOwn : T) - 1;
  const int64_t num_tiles = last_row / kStream + 1;
  for (int64_t tile = 0; tile < num_tiles; tile++) {
    const int64_t k0 = tile * kStream;
    __syncthreads();  // k_s, v_s, ds_s of the previous tile are no longer read
    load_tile<HS, kStream>(k_s, q_g + C, ld, k0, T, hs);
    load_tile<HS, kStream>(v_s, q_g + 2 * C, ld, k0, T, hs);
    __syncthreads();

    float s[kOwnPerThread][kStreamPerThread] = {};
    float dp[kOwnPerThread][kStreamPerThread] = {};
    gemm_abt<kOwnPerThread, kStreamPerThread, HS>(s, q_s, kLdH, k_s, kLdH);
    gemm_abt<kOwnPerThread, kStreamPerThread, HS>(dp, do_s, kLdH, v_s, kLdH);
#pragma unroll
    for (int a = 0; a < kOwnPerThread; a++) {
      const int64_t row = q0 + ty + 16 * a;
#pragma unroll
      for (int b = 0; b < kStreamPerThread; b++) {
        const int64_t col = k0 + tx + 16 * b;
        const bool visible = col <= row && row < T;  // row < T implies col < T
        const float p = visible ? expf(s[a][b] * scale - lse_r[a]) : 0.0f;
        ds_s[(ty + 16 * a) * kLdS + tx + 16 * b] = p * (dp[a][b] - d_r[a]);
      }
    }
    __syncthreads();  // ds_s complete
    gemm_ab<kOwnPerThread, kCols, kStream>(dq, ds_s, kLdS, k_s, kLdH);
  }

#pragma unroll
  for (int a = 0; a < kOwnPerThread; a++) {
    const int64_t row = q0 + ty + 16 * a;
    if (row >= T) continue;
    float* dq_g = dqkv + hv.qkv_offset + row * ld;
#pragma unroll
    for (int d = 0; d < kCols; d++) {
      if (tx + 16 * d < hs) dq_g[tx + 16 * d] += scale * dq[a][d];
    }
  }
}

// ---- backward: dk, dv ---------------------------------------------------------------------------
// Block (bh, y) owns keys k0 .. k0+63, k0 = 64 y (the first key blocks see the most queries and
// are scheduled first), and streams query tiles from the one holding query k0 to the last, in
// order; queries before k0 see none of these keys. Products are formed transposed (rows are
// keys), so each thread accumulates dk and dv rows ty + 16a in registers.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(float* __restrict__ dqkv,         // (B,T,3C) +=, k, v thirds
                                   const float* __restrict__ dout,   // (B,T,C)
                                   const float* __restrict__ qkv,    // (B,T,3C)
                                   const float* __restrict__ lse,    // (B,NH,T)
                                   const float* __restrict__ delta,  // (B,NH,T)
                                   int64_t T, int64_t C, int64_t NH, int hs, float scale) {
  constexpr int kLdH = HS + 1;
  constexpr int kCols = HS / 16;
  extern __shared__ float smem[];
  float* k_s = smem;                     // (kOwn, kLdH)
  float* v_s = k_s + kOwn * kLdH;        // (kOwn, kLdH)
  float* q_s = v_s + kOwn * kLdH;        // (kStream, kLdH) current query tile
  float* do_s = q_s + kStream * kLdH;    // (kStream, kLdH) its dout rows
  float* lse_s = do_s + kStream * kLdH;  // (kStream)
  float* d_s = lse_s + kStream;          // (kStream)
  float* pt_s = d_s + kStream;           // (kOwn, kLdS) P^T of the tile
  float* dst_s = pt_s + kOwn * kLdS;     // (kOwn, kLdS) dS^T of the tile

  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const HeadView hv = head_view(T, C, NH, hs);
  const int64_t ld = 3 * C;
  const float* q_g = qkv + hv.qkv_offset;
  const int64_t k0 = static_cast<int64_t>(blockIdx.y) * kOwn;
  load_tile<HS, kOwn>(k_s, q_g + C, ld, k0, T, hs);
  load_tile<HS, kOwn>(v_s, q_g + 2 * C, ld, k0, T, hs);

  float dk[kOwnPerThread][kCols] = {};
  float dv[kOwnPerThread][kCols] = {};
  const int64_t num_tiles = (T + kStream - 1) / kStream;
  for (int64_t tile = k0 / kStream; tile < num_tiles; tile++) {
    const int64_t i0 = tile * kStream;
    __syncthreads();  // the previous tile's q_s, do_s, lse_s, d_s, pt_s, dst_s are no longer read
    load_tile<HS, kStream>(q_s, q_g, ld, i0, T, hs);
    load_tile<HS, kStream>(do_s, dout + hv.out_offset, C, i0, T, hs);
    if (threadIdx.x < kStream) {
      const int64_t row = i0 + threadIdx.x;
      lse_s[threadIdx.x] = row < T ? lse[hv.stat_offset + row] : 0.0f;
      d_s[threadIdx.x] = row < T ? delta[hv.stat_offset + row] : 0.0f;
    }
    __syncthreads();

    float st[kOwnPerThread][kStreamPerThread] = {};   // S^T: keys x queries
    float dpt[kOwnPerThread][kStreamPerThread] = {};  // dP^T
    gemm_abt<kOwnPerThread, kStreamPerThread, HS>(st, k_s, kLdH, q_s, kLdH);
    gemm_abt<kOwnPerThread, kStreamPerThread, HS>(dpt, v_s, kLdH, do_s, kLdH);
#pragma unroll
    for (int a = 0; a < kOwnPerThread; a++) {
      const int64_t key = k0 + ty + 16 * a;
#pragma unroll
      for (int b = 0; b < kStreamPerThread; b++) {
        const int i = tx + 16 * b;
        const int64_t query = i0 + i;
        const bool visible = key <= query && query < T;  // query < T implies key < T
        const float p = visible ? expf(st[a][b] * scale - lse_s[i]) : 0.0f;
        pt_s[(ty + 16 * a) * kLdS + i] = p;
        dst_s[(ty + 16 * a) * kLdS + i] = p * (dpt[a][b] - d_s[i]);
      }
    }
    __syncthreads();  // pt_s, dst_s complete
    gemm_ab<kOwnPerThread, kCols, kStream>(dv, pt_s, kLdS, do_s, kLdH);
    gemm_ab<kOwnPerThread, kCols, kStream>(dk, dst_s, kLdS, q_s, kLdH);
  }

#pragma unroll
  for (int a = 0; a < kOwnPerThread; a++) {
    const int64_t key = k0 + ty + 16 * a;
    if (key >= T) continue;
    float* dk_g = dqkv + hv.qkv_offset + key * ld + C;
    float* dv_g = dk_g + C;
#pragma unroll
    for (int d = 0; d < kCols; d++) {
      if (tx + 16 * d < hs) {
        dk_g[tx + 16 * d] += scale * dk[a][d];
        dv_g[tx + 16 * d] += dv[a][d];
      }
    }
  }
}

// ---- launchers ----------------------------------------------------------------------------------

// Launches kernel with smem_floats of dynamic shared memory. Above 48 KiB a kernel must opt in,
// per kernel and device; setting the attribute is a host-side call that does not synchronize,
// so it is simply repeated on every launch (also right when the caller switches devices).
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), int smem_floats, dim3 grid, cudaStream_t stream,
            Args... args) {
  const int bytes = smem_floats * static_cast<int>(sizeof(float));
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) {
    const std::string msg = "fused attention needs " + std::to_string(bytes) +
                            " bytes of shared memory per block: " + cudaGetErrorString(err);
    detail::check_failed(__FILE__, __LINE__, "cudaFuncSetAttribute", msg.c_str());
  }
  kernel<<<grid, kThreads, bytes, stream>>>(args...);
  STRATA_CUDA_LAUNCH_CHECK();
}

// The padded width HS the kernels run for head size hs (see the Note at the top).
int padded_head_size(int64_t hs) {
  for (int width : {16, 32, 64, 80, 96, 128}) {
    if (hs <= width) return width;
  }
  return 0;
}

// grid.x = (b, h) pairs, grid.y = 64-row blocks of the sequence.
dim3 attention_grid(int64_t B, int64_t T, int64_t C, int64_t NH) {
  STRATA_CHECK_MSG(NH > 0 && C % NH == 0 && C / NH <= kMaxHeadSize,
                   "fused attention: C must split into NH heads of at most 128");
  const int64_t blocks = (T + kOwn - 1) / kOwn;
  STRATA_CHECK_MSG(B * NH < (int64_t{1} << 31) && blocks <= 65535,
                   "fused attention: B*NH or T too large for the grid");
  return dim3(static_cast<unsigned>(B * NH), static_cast<unsigned>(blocks));
}

template <int HS>
void attention_forward_hs(cudaStream_t stream, float* out, float* att, const float* qkv, int64_t B,
                          int64_t T, int64_t C, int64_t NH) {
  const int hs = static_cast<int>(C / NH);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  launch(attention_forward_kernel<HS, false>, forward_smem_floats<HS>(),
         attention_grid(B, T, C, NH), stream, out, att, static_cast<float*>(nullptr), qkv,
         static_cast<const float*>(nullptr), T, C, NH, hs, scale);
}

// Three launches on one stream: the D pass (into scratch), then dq, then dk/dv. dq and dk/dv
// write disjoint thirds of dqkv and only read the D pass's output.
template <int HS>
void attention_backward_hs(cudaStream_t stream, float* dqkv, float* scratch, const float* dout,
                           const float* qkv, const float* att, int64_t B, int64_t T, int64_t C,
                           int64_t NH) {
  const int hs = static_cast<int>(C / NH);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const dim3 grid = attention_grid(B, T, C, NH);
  launch(attention_forward_kernel<HS, true>, forward_smem_floats<HS>(), grid, stream,
         static_cast<float*>(nullptr), static_cast<float*>(nullptr), scratch, qkv, dout, T, C, NH,
         hs, scale);
  launch(attention_backward_dq_kernel<HS>, backward_dq_smem_floats<HS>(), grid, stream, dqkv, dout,
         qkv, att, static_cast<const float*>(scratch), T, C, NH, hs, scale);
  launch(attention_backward_dkdv_kernel<HS>, backward_dkdv_smem_floats<HS>(), grid, stream, dqkv,
         dout, qkv, att, static_cast<const float*>(scratch), T, C, NH, hs, scale);
}

// ---- decode: one query against a key/value cache ---------------------------------------------
// Note [Decode attention on CUDA]
// Three launches on one stream, for query head h (grid.x) of the newest position:
//   scores         grid.y tiles of kDecodeThreads keys, one key per thread: s_t = (q_h . k_t) *
//                  scale, the dot product an fmaf chain over i = 0 .. hs-1 from +0 (q and the key
//                  tile staged through shared memory kDecodeChunk columns at a time), the scale
//                  applied with __fmul_rn. Written to scratch (NH,T).
//   softmax        one block per head: max (exact), e_t = exp_fast(s_t - max), their sum (each
//                  thread's keys t = tid, tid + 256, ... in order, then block_sum's fixed tree),
//                  p_t = e_t * (1 / sum). p overwrites the scores in scratch.
//   weighted sum   grid.y blocks of kDecodeThreads output columns, one column per thread:
//                  out_d = an fmaf chain over t = 0 .. T-1 from +0 of p_t * v_t[d].
// This is the CPU's order (Note [Decode attention] in cpu/kernels_attention.cpp) everywhere but
// the row sum, whose CPU order is GCC's vectorization of an OpenMP simd reduction: the scores
// and the exponentials are the CPU's bits (explicit fmaf and _rn intrinsics, nothing left for
// nvcc to contract; exp_fast below is cpu::exp_fast step for step), the sum differs by
// rounding, and so p and out agree with the CPU to about an ulp. No atomics; fixed shapes:
// deterministic (Note [Deterministic CUDA reductions]). Any hs: the chunked staging has no size
// limit. Memory-bound and small; it makes no attempt at the fused forward's tiling.

constexpr int kDecodeThreads = 128;  // keys per scores block, columns per weighted-sum block
constexpr int kDecodeChunk = 32;     // key columns staged per step
constexpr int kDecodeSoftmaxThreads = 256;

// cpu::exp_fast (cpu/kernels.h), operation for operation: the same constants, clamps written as
// std::min / std::max evaluate them, fmaf for std::fma, and _rn intrinsics for the plain
// subtraction and multiply so that nvcc fuses nothing. Same input, same bits.
__device__ __forceinline__ float exp_fast(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  constexpr float kRound = 12582912.0f;
  constexpr float kC7 = 1.0f / 5040.0f, kC6 = 1.0f / 720.0f, kC5 = 1.0f / 120.0f;
  constexpr float kC4 = 1.0f / 24.0f, kC3 = 1.0f / 6.0f;
  const float lo = x < -87.0f ? -87.0f : x;  // std::max(x, -87.0f)
  const float xc = 88.0f < lo ? 88.0f : lo;  // std::min(lo, 88.0f)
  const float t = fmaf(xc, kLog2e, kRound);
  const float n = __fsub_rn(t, kRound);
  float r = fmaf(n, -kLn2Hi, xc);
  r = fmaf(n, -kLn2Lo, r);
  float p = kC7;
  p = fmaf(p, r, kC6);
  p = fmaf(p, r, kC5);
  p = fmaf(p, r, kC4);
  p = fmaf(p, r, kC3);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  const int32_t n_int = __float_as_int(t) - __float_as_int(kRound);
  const int32_t scale_bits = x < -87.0f ? 0 : (n_int + 127) << 23;
  return __fmul_rn(p, __int_as_float(scale_bits));
}

__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_scores_kernel(float* __restrict__ scratch,   // (NH,T)
                                   const float* __restrict__ q,   // (NH*hs)
                                   const float* __restrict__ kv,  // (T, 2*NKV*hs)
                                   int64_t T, int64_t NKV, int64_t rep, int hs, float scale) {
  constexpr int kLd = kDecodeChunk + 1;        // odd row length: a warp's 32 rows in 32 banks
  __shared__ float k_s[kDecodeThreads * kLd];  // (kDecodeThreads, kLd)  keys t0.., columns i0..
  __shared__ float q_s[kDecodeChunk];          // (kDecodeChunk)         q_h, columns i0..
  const int64_t h = blockIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kDecodeThreads;
  const int64_t ld = 2 * NKV * hs;
  const float* k_g = kv + (h / rep) * hs;  // key head of position t at k_g + t*ld
  const float* q_g = q + h * hs;
  float acc = 0.0f;
  for (int i0 = 0; i0 < hs; i0 += kDecodeChunk) {
    const int width = hs - i0 < kDecodeChunk ? hs - i0 : kDecodeChunk;
    __syncthreads();  // the previous chunk is no longer read
    for (int e = threadIdx.x; e < kDecodeThreads * kDecodeChunk; e += kDecodeThreads) {
      const int r = e / kDecodeChunk, c = e % kDecodeChunk;
      const int64_t t = t0 + r;
      k_s[r * kLd + c] = t < T && c < width ? k_g[t * ld + i0 + c] : 0.0f;
    }
    if (threadIdx.x < kDecodeChunk) {
      q_s[threadIdx.x] = static_cast<int>(threadIdx.x) < width ? q_g[i0 + threadIdx.x] : 0.0f;
    }
    __syncthreads();
    const float* k_row = k_s + threadIdx.x * kLd;
    for (int c = 0; c < width; c++) acc = fmaf(q_s[c], k_row[c], acc);
  }
  const int64_t t = t0 + threadIdx.x;
  if (t < T) scratch[h * T + t] = __fmul_rn(acc, scale);
}

__global__ void __launch_bounds__(kDecodeSoftmaxThreads)
    attention_decode_softmax_kernel(float* __restrict__ scratch,  // (NH,T) scores -> probabilities
                                    int64_t T) {
  __shared__ float shared[32];
  float* row = scratch + static_cast<int64_t>(blockIdx.x) * T;
  float max = -INFINITY;
  for (int64_t t = threadIdx.x; t < T; t += kDecodeSoftmaxThreads)
    max = row[t] > max ? row[t] : max;
  max = kernels_detail::block_max<kDecodeSoftmaxThreads>(max, shared);
  float sum = 0.0f;
  for (int64_t t = threadIdx.x; t < T; t += kDecodeSoftmaxThreads) {
    const float e = exp_fast(__fsub_rn(row[t], max));
    row[t] = e;
    sum = __fadd_rn(sum, e);
  }
  sum = kernels_detail::block_sum<kDecodeSoftmaxThreads>(sum, shared);
  const float inv = __fdiv_rn(1.0f, sum);
  for (int64_t t = threadIdx.x; t < T; t += kDecodeSoftmaxThreads) row[t] = __fmul_rn(row[t], inv);
}

__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_weighted_sum_kernel(float* __restrict__ out,            // (NH*hs)
                                         const float* __restrict__ scratch,  // (NH,T) probabilities
                                         const float* __restrict__ kv,       // (T, 2*NKV*hs)
                                         int64_t T, int64_t NKV, int64_t rep, int hs) {
  __shared__ float p_s[kDecodeThreads];  // probabilities t0 .. t0+kDecodeThreads
  const int64_t h = blockIdx.x;
  const int d = static_cast<int>(blockIdx.y) * kDecodeThreads + static_cast<int>(threadIdx.x);
  const int64_t ld = 2 * NKV * hs;
  const float* v_g = kv + (NKV + h / rep) * hs;  // value head of position t at v_g + t*ld
  const float* p_g = scratch + h * T;
  float acc = 0.0f;
  for (int64_t t0 = 0; t0 < T; t0 += kDecodeThreads) {
    const int n = T - t0 < kDecodeThreads ? static_cast<int>(T - t0) : kDecodeThreads;
    __syncthreads();  // the previous tile of p_s is no longer read
    if (static_cast<int>(threadIdx.x) < n) p_s[threadIdx.x] = p_g[t0 + threadIdx.x];
    __syncthreads();
    if (d < hs) {
      for (int u = 0; u < n; u++) acc = fmaf(p_s[u], v_g[(t0 + u) * ld + d], acc);
    }
  }
  if (d < hs) out[h * hs + d] = acc;
}

}  // namespace

void cuda_attention_decode(cudaStream_t stream, float* out, float* scratch, const float* q,
                           const float* kv, int64_t T, int64_t NH, int64_t NKV, int64_t hs) {
  STRATA_CHECK_MSG(T >= 1 && NKV > 0 && NH % NKV == 0 && hs > 0,
                   "attention_decode: needs T >= 1, hs > 0, NKV > 0 and NH % NKV == 0");
  if (NH == 0) return;
  const int64_t key_blocks = (T + kDecodeThreads - 1) / kDecodeThreads;
  const int64_t column_blocks = (hs + kDecodeThreads - 1) / kDecodeThreads;
  STRATA_CHECK_MSG(NH < (int64_t{1} << 31) && key_blocks <= 65535 && column_blocks <= 65535 &&
                       2 * NKV * hs <= INT32_MAX,
                   "attention_decode: NH, T or hs too large for the grid");
  const int hs32 = static_cast<int>(hs);
  const int64_t rep = NH / NKV;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));  // as the CPU
  const unsigned heads = static_cast<unsigned>(NH);
  attention_decode_scores_kernel<<<dim3(heads, static_cast<unsigned>(key_blocks)), kDecodeThreads,
                                   0, stream>>>(scratch, q, kv, T, NKV, rep, hs32, scale);
  STRATA_CUDA_LAUNCH_CHECK();
  attention_decode_softmax_kernel<<<heads, kDecodeSoftmaxThreads, 0, stream>>>(scratch, T);
  STRATA_CUDA_LAUNCH_CHECK();
  attention_decode_weighted_sum_kernel<<<dim3(heads, static_cast<unsigned>(column_blocks)),
                                         kDecodeThreads, 0, stream>>>(out, scratch, kv, T, NKV, rep,
                                                                      hs32);
  STRATA_CUDA_LAUNCH_CHECK();
}

bool cuda_attention_supports_head_size(int64_t hs) {
  return hs >= 1 && hs <= kMaxHeadSize;
}

void cuda_attention_forward(cudaStream_t stream, float* out, float* att, const float* qkv,
                            int64_t B, int64_t T, int64_t C, int64_t NH) {
  if (B <= 0 || T <= 0) return;
  STRATA_CHECK_MSG(NH > 0 && C % NH == 0, "fused attention: C must be a multiple of NH");
  switch (padded_head_size(C / NH)) {
    case 16:
      return attention_forward_hs<16>(stream, out, att, qkv, B, T, C, NH);
    case 32:
      return attention_forward_hs<32>(stream, out, att, qkv, B, T, C, NH);
    case 64:
      return attention_forward_hs<64>(stream, out, att, qkv, B, T, C, NH);
    case 80:
      return attention_forward_hs<80>(stream, out, att, qkv, B, T, C, NH);
    case 96:
      return attention_forward_hs<96>(stream, out, att, qkv, B, T, C, NH);
    case 128:
      return attention_forward_hs<128>(stream, out, att, qkv, B, T, C, NH);
    default:
      STRATA_CHECK_MSG(false, "fused attention: head size above 128");
  }
}

void cuda_attention_backward(cudaStream_t stream, float* dqkv, float* scratch, const float* dout,
                             const float* qkv, const float* att, int64_t B, int64_t T, int64_t C,
                             int64_t NH) {
  if (B <= 0 || T <= 0) return;
  STRATA_CHECK_MSG(NH > 0 && C % NH == 0, "fused attention: C must be a multiple of NH");
  const float* d = dout;
  switch (padded_head_size(C / NH)) {
    case 16:
      return attention_backward_hs<16>(stream, dqkv, scratch, d, qkv, att, B, T, C, NH);
    case 32:
      return attention_backward_hs<32>(stream, dqkv, scratch, d, qkv, att, B, T, C, NH);
    case 64:
      return attention_backward_hs<64>(stream, dqkv, scratch, d, qkv, att, B, T, C, NH);
    case 80:
      return attention_backward_hs<80>(stream, dqkv, scratch, d, qkv, att, B, T, C, NH);
    case 96:
      return attention_backward_hs<96>(stream, dqkv, scratch, d, qkv, att, B, T, C, NH);
    case 128:
      return attention_backward_hs<128>(stream, dqkv, scratch, d, qkv, att, B, T, C, NH);
    default:
      STRATA_CHECK_MSG(false, "fused attention: head size above 128");
  }
}

}  // namespace strata
