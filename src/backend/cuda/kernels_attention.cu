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
// (cpu::ref::attention_backward with datt = dP, and D = sum_j p[j] datt[j]). The kernels stream
// tiles of the other operand through shared memory, so memory is O(T) per head (the tiling is
// described at kThreads below); head sizes up to 128 (with_padded_head_size).

// Note [Deterministic attention backward]
// Every dq, dk, dv element is accumulated in registers by the one thread that owns it, over the
// streamed tiles in increasing order, and added to dqkv once at the end: no atomics, no split
// over blocks, the same bits on every run. The price is that S and dP are computed twice (dq and
// dk/dv kernels) plus the D pass.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/kernels.cuh"
#include "backend/cuda/kernels_common.cuh"
#include "core/check.h"

namespace strata {

namespace {

using kernels_detail::group_max;
using kernels_detail::group_sum;

// Tiling. A block of kThreads threads owns kOwn rows of one (b, h) and streams tiles of kStream
// rows of the other operand through shared memory:
//   forward   owns 64 queries, streams key/value tiles 0 .. the diagonal; online softmax
//             (running max m_i and sum l_i, O rescaled by exp(m_old - m_new) per tile).
//   D pass    the forward kernel again, recomputing O, writing D_i = dO_i . O_i instead of
//             out and lse. O is not an input of attention_backward, and this costs one forward.
//   dq        owns 64 queries, streams key tiles 0 .. the diagonal: S, P from lse, dP, dS, dq.
//   dk, dv    owns 64 keys, streams query tiles from the diagonal to T-1: S^T, P^T, dP^T, dS^T.
// Inside a block the 256 threads form a 16 x 16 grid (tx = threadIdx.x % 16, ty = / 16); a
// thread computes rows ty + 16a of a product and columns tx + 16b, so a row's 16 threads are one
// half-warp and row reductions are xor shuffles within it. The products read shared-memory
// tiles whose row length is padded to an odd number of floats (HS + 1, kStream + 1): the 16
// rows one half-warp reads at the same column then fall in 16 different banks.
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

// How gemm_tile reads its B operand from shared memory: B(k, n) = B[n * ldb + k] (transposed:
// stored as the rows of B^T, e.g. K for S = Q K^T) or B[k * ldb + n] (plain).
enum class BLayout { transposed, plain };

// acc[i][j] += sum_k A[ty+16i][k] * B(k, tx+16j)   (A and B in shared memory)
template <BLayout kB, int RA, int RB, int K>
__device__ __forceinline__ void gemm_tile(float (&acc)[RA][RB], const float* A, int lda,
                                          const float* B, int ldb) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll 8
  for (int k = 0; k < K; k++) {
    float a[RA], b[RB];
#pragma unroll
    for (int i = 0; i < RA; i++) a[i] = A[(ty + 16 * i) * lda + k];
#pragma unroll
    for (int j = 0; j < RB; j++) {
      b[j] = kB == BLayout::transposed ? B[(tx + 16 * j) * ldb + k] : B[k * ldb + tx + 16 * j];
    }
#pragma unroll
    for (int i = 0; i < RA; i++) {
#pragma unroll
      for (int j = 0; j < RB; j++) acc[i][j] += a[i] * b[j];
    }
  }
}

// Shared memory per block, in floats. dk/dv's is the largest, 113.5 KiB at HS = 128: past the
// 48 KiB a kernel gets without opting in (launch).
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

// The first of the 64 queries block (bh, y) owns: 64 * (gridDim.y - 1 - y), so that the longest
// rows (most key tiles) are scheduled first.
__device__ __forceinline__ int64_t owned_queries_start() {
  return static_cast<int64_t>(gridDim.y - 1 - blockIdx.y) * kOwn;
}

// Key tiles 0 .. the one holding the last owned query (q0 + 63, or T - 1): those the causal mask
// leaves visible to queries q0 ..
__device__ __forceinline__ int64_t key_tiles_to_diagonal(int64_t q0, int64_t T) {
  const int64_t last_row = (q0 + kOwn < T ? q0 + kOwn : T) - 1;
  return last_row / kStream + 1;
}

// k_s, v_s (kRows, HS+1) <- rows row0 .. of the head's keys and values.
template <int HS, int kRows>
__device__ __forceinline__ void load_kv_tiles(float* k_s, float* v_s, const float* qkv,
                                              const HeadView& hv, int64_t row0) {
  const float* q_g = qkv + hv.qkv_offset;
  load_tile<HS, kRows>(k_s, q_g + hv.C, 3 * hv.C, row0, hv.T, hv.hs);
  load_tile<HS, kRows>(v_s, q_g + 2 * hv.C, 3 * hv.C, row0, hv.T, hv.hs);
}

// dst[r * ld + tx + 16d] += scale * acc[a][d] (kScaled) or acc[a][d], r = r0 + ty + 16a, for the
// calling thread's rows below T and columns below hs: a backward kernel's last step.
template <bool kScaled, int kCols>
__device__ __forceinline__ void add_owned_rows(float* dst, int64_t ld, int64_t r0,
                                               const float (&acc)[kOwnPerThread][kCols],
                                               float scale, int64_t T, int hs) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
  for (int a = 0; a < kOwnPerThread; a++) {
    const int64_t row = r0 + ty + 16 * a;
    if (row >= T) continue;
    float* dst_row = dst + row * ld;
#pragma unroll
    for (int d = 0; d < kCols; d++) {
      if (tx + 16 * d >= hs) continue;
      if constexpr (kScaled) {
        dst_row[tx + 16 * d] += scale * acc[a][d];
      } else {
        dst_row[tx + 16 * d] += acc[a][d];
      }
    }
  }
}

// ---- forward (and the backward's D pass) ------------------------------------------------------

// One key tile of the online softmax, for the calling thread's rows ty + 16a: s holds their
// scores q . k against keys k0 + tx + 16b (unscaled); masks and scales them, moves the running
// max m to the tile's, rescales l and o by exp(m_old - m_new), and writes the tile's
// unnormalized probabilities exp(s - m_new) to p_s (kOwn, kLdS), adding them into l.
template <int kCols>
__device__ __forceinline__ void online_softmax_tile(float (&s)[kOwnPerThread][kStreamPerThread],
                                                    float (&o)[kOwnPerThread][kCols],
                                                    float (&m)[kOwnPerThread],
                                                    float (&l)[kOwnPerThread], float* p_s,
                                                    int64_t q0, int64_t k0, int64_t T,
                                                    float scale) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
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
}

// The forward's last step for the calling thread's rows ty + 16a, O = o / l: kDelta = false
// writes O to out and lse = m + log l; kDelta = true writes only delta = dout . O. The shuffles
// run on all lanes; only the loads and stores depend on row < T.
template <bool kDelta, int kCols>
__device__ __forceinline__ void finish_forward_rows(float* out, float* lse, float* delta,
                                                    const float* dout, const HeadView& hv,
                                                    int64_t q0,
                                                    const float (&o)[kOwnPerThread][kCols],
                                                    const float (&m)[kOwnPerThread],
                                                    const float (&l)[kOwnPerThread]) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t T = hv.T, C = hv.C;
  const int hs = hv.hs;
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

// Block (bh, y) owns queries q0 .. q0+63 (owned_queries_start) and streams the key tiles up to
// the diagonal. kDelta = false: writes out and lse. kDelta = true: writes only delta_i =
// dout_i . O_i (the D pass of the backward).
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

  const HeadView hv = head_view(T, C, NH, hs);
  const int64_t q0 = owned_queries_start();
  load_tile<HS, kOwn>(q_s, qkv + hv.qkv_offset, 3 * C, q0, T, hs);

  float o[kOwnPerThread][kCols] = {};  // unnormalized output rows ty + 16a
  float m[kOwnPerThread];              // running max of the scaled scores
  float l[kOwnPerThread] = {};         // running sum of exp(s - m), over this thread's columns
#pragma unroll
  for (int a = 0; a < kOwnPerThread; a++) m[a] = -INFINITY;

  const int64_t num_tiles = key_tiles_to_diagonal(q0, T);
  for (int64_t tile = 0; tile < num_tiles; tile++) {
    const int64_t k0 = tile * kStream;
    __syncthreads();  // the previous tile's k_s, v_s, p_s are no longer read
    load_kv_tiles<HS, kStream>(k_s, v_s, qkv, hv, k0);
    __syncthreads();

    float s[kOwnPerThread][kStreamPerThread] = {};
    gemm_tile<BLayout::transposed, kOwnPerThread, kStreamPerThread, HS>(s, q_s, kLdH, k_s, kLdH);
    online_softmax_tile(s, o, m, l, p_s, q0, k0, T, scale);
    __syncthreads();  // p_s complete
    gemm_tile<BLayout::plain, kOwnPerThread, kCols, kStream>(o, p_s, kLdS, v_s, kLdH);
  }
  finish_forward_rows<kDelta>(out, lse, delta, dout, hv, q0, o, m, l);
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
  const int64_t q0 = owned_queries_start();
  load_tile<HS, kOwn>(q_s, qkv + hv.qkv_offset, 3 * C, q0, T, hs);
  load_tile<HS, kOwn>(do_s, dout + hv.out_offset, C, q0, T, hs);

  float lse_r[kOwnPerThread], d_r[kOwnPerThread];  // per owned row; 0 for rows >= T (masked)
#pragma unroll
  for (int a = 0; a < kOwnPerThread; a++) {
    const int64_t row = q0 + ty + 16 * a;
    lse_r[a] = row < T ? lse[hv.stat_offset + row] : 0.0f;
    d_r[a] = row < T ? delta[hv.stat_offset + row] : 0.0f;
  }

  float dq[kOwnPerThread][kCols] = {};
  const int64_t num_tiles = key_tiles_to_diagonal(q0, T);
  for (int64_t tile = 0; tile < num_tiles; tile++) {
    const int64_t k0 = tile * kStream;
    __syncthreads();  // k_s, v_s, ds_s of the previous tile are no longer read
    load_kv_tiles<HS, kStream>(k_s, v_s, qkv, hv, k0);
    __syncthreads();

    float s[kOwnPerThread][kStreamPerThread] = {};
    float dp[kOwnPerThread][kStreamPerThread] = {};
    gemm_tile<BLayout::transposed, kOwnPerThread, kStreamPerThread, HS>(s, q_s, kLdH, k_s, kLdH);
    gemm_tile<BLayout::transposed, kOwnPerThread, kStreamPerThread, HS>(dp, do_s, kLdH, v_s, kLdH);
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
    gemm_tile<BLayout::plain, kOwnPerThread, kCols, kStream>(dq, ds_s, kLdS, k_s, kLdH);
  }
  add_owned_rows<true>(dqkv + hv.qkv_offset, 3 * C, q0, dq, scale, T, hs);
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
  const int64_t k0 = static_cast<int64_t>(blockIdx.y) * kOwn;
  load_kv_tiles<HS, kOwn>(k_s, v_s, qkv, hv, k0);

  float dk[kOwnPerThread][kCols] = {};
  float dv[kOwnPerThread][kCols] = {};
  const int64_t num_tiles = (T + kStream - 1) / kStream;
  for (int64_t tile = k0 / kStream; tile < num_tiles; tile++) {
    const int64_t i0 = tile * kStream;
    __syncthreads();  // the previous tile's q_s, do_s, lse_s, d_s, pt_s, dst_s are no longer read
    load_tile<HS, kStream>(q_s, qkv + hv.qkv_offset, 3 * C, i0, T, hs);
    load_tile<HS, kStream>(do_s, dout + hv.out_offset, C, i0, T, hs);
    if (threadIdx.x < kStream) {
      const int64_t row = i0 + threadIdx.x;
      lse_s[threadIdx.x] = row < T ? lse[hv.stat_offset + row] : 0.0f;
      d_s[threadIdx.x] = row < T ? delta[hv.stat_offset + row] : 0.0f;
    }
    __syncthreads();

    float st[kOwnPerThread][kStreamPerThread] = {};   // S^T: keys x queries
    float dpt[kOwnPerThread][kStreamPerThread] = {};  // dP^T
    gemm_tile<BLayout::transposed, kOwnPerThread, kStreamPerThread, HS>(st, k_s, kLdH, q_s, kLdH);
    gemm_tile<BLayout::transposed, kOwnPerThread, kStreamPerThread, HS>(dpt, v_s, kLdH, do_s, kLdH);
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
    gemm_tile<BLayout::plain, kOwnPerThread, kCols, kStream>(dv, pt_s, kLdS, do_s, kLdH);
    gemm_tile<BLayout::plain, kOwnPerThread, kCols, kStream>(dk, dst_s, kLdS, q_s, kLdH);
  }
  float* dk_g = dqkv + hv.qkv_offset + C;  // (T,hs), row stride 3C; dv at + C
  add_owned_rows<true>(dk_g, 3 * C, k0, dk, scale, T, hs);
  add_owned_rows<false>(dk_g + C, 3 * C, k0, dv, scale, T, hs);
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

// fn(std::integral_constant<int, HS>{}) for the padded width HS the kernels run for head size hs:
// the smallest HS >= hs, with columns hs .. HS-1 loaded as zeros (they add nothing to any dot
// product and are never written back). Rows >= T are zeros as well and masked out.
template <typename Fn>
void with_padded_head_size(int64_t hs, Fn&& fn) {
  if (hs <= 16) return fn(std::integral_constant<int, 16>{});
  if (hs <= 32) return fn(std::integral_constant<int, 32>{});
  if (hs <= 64) return fn(std::integral_constant<int, 64>{});
  if (hs <= 80) return fn(std::integral_constant<int, 80>{});
  if (hs <= 96) return fn(std::integral_constant<int, 96>{});
  if (hs <= 128) return fn(std::integral_constant<int, 128>{});
  STRATA_CHECK_MSG(false, "fused attention: head size above 128");
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

}  // namespace

bool cuda_attention_supports_head_size(int64_t hs) {
  return hs >= 1 && hs <= kMaxHeadSize;
}

void cuda_attention_forward(cudaStream_t stream, float* out, float* att, const float* qkv,
                            int64_t B, int64_t T, int64_t C, int64_t NH) {
  if (B <= 0 || T <= 0) return;
  STRATA_CHECK_MSG(NH > 0 && C % NH == 0, "fused attention: C must be a multiple of NH");
  with_padded_head_size(C / NH, [&](auto width) {
    attention_forward_hs<decltype(width)::value>(stream, out, att, qkv, B, T, C, NH);
  });
}

void cuda_attention_backward(cudaStream_t stream, float* dqkv, float* scratch, const float* dout,
                             const float* qkv, const float* att, int64_t B, int64_t T, int64_t C,
                             int64_t NH) {
  if (B <= 0 || T <= 0) return;
  STRATA_CHECK_MSG(NH > 0 && C % NH == 0, "fused attention: C must be a multiple of NH");
  with_padded_head_size(C / NH, [&](auto width) {
    attention_backward_hs<decltype(width)::value>(stream, dqkv, scratch, dout, qkv, att, B, T, C,
                                                  NH);
  });
}

}  // namespace strata
