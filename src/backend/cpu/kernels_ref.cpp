// Reference CPU kernels: the specification. Naive, single-threaded loops in the most direct
// form of each formula; speed is not a goal. The fast kernels are tested against these, and
// these are tested against finite differences (tests/test_kernels_grad.cpp).
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/check.h"
#include "core/targets.h"

namespace strata::cpu::ref {

// ---- matmul -------------------------------------------------------------------------------------

void matmul(float* out, const float* a, const float* b, const float* bias, int64_t M, int64_t N,
            int64_t K, bool trans_a, bool trans_b, bool accumulate) {
  for (int64_t i = 0; i < M; i++) {
    for (int64_t j = 0; j < N; j++) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; k++) {
        float a_ik = trans_a ? a[k * M + i] : a[i * K + k];
        float b_kj = trans_b ? b[j * K + k] : b[k * N + j];
        sum += a_ik * b_kj;
      }
      if (bias) sum += bias[j];
      out[i * N + j] = accumulate ? out[i * N + j] + sum : sum;
    }
  }
}

void bias_backward(float* dbias, const float* dout, int64_t M, int64_t N) {
  for (int64_t i = 0; i < M; i++) {
    for (int64_t j = 0; j < N; j++) dbias[j] += dout[i * N + j];
  }
}

// ---- layernorm ----------------------------------------------------------------------------------

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; i++) {
    const float* x = inp + i * C;
    float m = 0.0f;
    for (int64_t c = 0; c < C; c++) m += x[c];
    m /= static_cast<float>(C);
    float var = 0.0f;  // biased, as PyTorch
    for (int64_t c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= static_cast<float>(C);
    float s = 1.0f / std::sqrt(var + kLayerNormEps);
    for (int64_t c = 0; c < C; c++) out[i * C + c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

// With norm = (x - mean) * rstd and y = norm * w + b:
//   dnorm = dout * w
//   dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; i++) {
    const float* x = inp + i * C;
    const float* dy = dout + i * C;
    float dnorm_mean = 0.0f;
    float dnorm_norm_mean = 0.0f;
    for (int64_t c = 0; c < C; c++) {
      float norm = (x[c] - mean[i]) * rstd[i];
      float dnorm = weight[c] * dy[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= static_cast<float>(C);
    dnorm_norm_mean /= static_cast<float>(C);
    for (int64_t c = 0; c < C; c++) {
      float norm = (x[c] - mean[i]) * rstd[i];
      float dnorm = weight[c] * dy[c];
      dinp[i * C + c] += rstd[i] * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
      dweight[c] += norm * dy[c];
      dbias[c] += dy[c];
    }
  }
}

// ---- GELU (tanh approximation, as PyTorch gelu(approximate='tanh')) ---------------------------

void gelu_forward(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + std::tanh(u));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCubic * x * x * x);
    float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    float th = std::tanh(u);
    float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du_dx;
    dinp[i] += grad * dout[i];
  }
}

// ---- attention ----------------------------------------------------------------------------------

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  STRATA_CHECK(NH > 0 && C % NH == 0);
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int64_t b = 0; b < B; b++) {
    for (int64_t h = 0; h < NH; h++) {
      for (int64_t t = 0; t < T; t++) {
        const float* q = qkv + (b * T + t) * 3 * C + h * hs;
        float* row = att + ((b * NH + h) * T + t) * T;
        // Scores for the visible positions 0..t, then a max-subtracted softmax over them.
        float max = -INFINITY;
        for (int64_t t2 = 0; t2 <= t; t2++) {
          const float* k = qkv + (b * T + t2) * 3 * C + C + h * hs;
          float s = 0.0f;
          for (int64_t i = 0; i < hs; i++) s += q[i] * k[i];
          row[t2] = s * scale;
          if (row[t2] > max) max = row[t2];
        }
        float sum = 0.0f;
        for (int64_t t2 = 0; t2 <= t; t2++) {
          row[t2] = std::exp(row[t2] - max);
          sum += row[t2];
        }
        for (int64_t t2 = 0; t2 <= t; t2++) row[t2] /= sum;
        for (int64_t t2 = t + 1; t2 < T; t2++) row[t2] = 0.0f;  // causal mask
        float* o = out + (b * T + t) * C + h * hs;
        for (int64_t i = 0; i < hs; i++) {
          float s = 0.0f;
          for (int64_t t2 = 0; t2 <= t; t2++) {
            const float* v = qkv + (b * T + t2) * 3 * C + 2 * C + h * hs;
            s += row[t2] * v[i];
          }
          o[i] = s;
        }
      }
    }
  }
}

// Per query row t, with p = att[t, 0..t] and s the pre-softmax scores:
//   datt[t2]  = dout[t] . v[t2]
//   ds[t2]    = p[t2] * (datt[t2] - sum_j p[j] * datt[j])
//   dq[t]    += scale * sum_t2 ds[t2] * k[t2]
//   dk[t2]   += scale * ds[t2] * q[t]
//   dv[t2]   += p[t2] * dout[t]
// The scratch row holds datt, then ds.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int64_t B, int64_t T, int64_t C, int64_t NH) {
  STRATA_CHECK(NH > 0 && C % NH == 0);
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int64_t b = 0; b < B; b++) {
    for (int64_t h = 0; h < NH; h++) {
      for (int64_t t = 0; t < T; t++) {
        const float* p = att + ((b * NH + h) * T + t) * T;
        float* ds = scratch + ((b * NH + h) * T + t) * T;
        const float* q = qkv + (b * T + t) * 3 * C + h * hs;
        float* dq = dqkv + (b * T + t) * 3 * C + h * hs;
        const float* dy = dout + (b * T + t) * C + h * hs;
        float dot = 0.0f;
        for (int64_t t2 = 0; t2 <= t; t2++) {
          const float* v = qkv + (b * T + t2) * 3 * C + 2 * C + h * hs;
          float datt = 0.0f;
          for (int64_t i = 0; i < hs; i++) datt += dy[i] * v[i];
          ds[t2] = datt;
          dot += p[t2] * datt;
        }
        for (int64_t t2 = 0; t2 <= t; t2++) ds[t2] = p[t2] * (ds[t2] - dot);
        for (int64_t t2 = 0; t2 <= t; t2++) {
          const float* k = qkv + (b * T + t2) * 3 * C + C + h * hs;
          float* dk = dqkv + (b * T + t2) * 3 * C + C + h * hs;
          float* dv = dqkv + (b * T + t2) * 3 * C + 2 * C + h * hs;
          for (int64_t i = 0; i < hs; i++) {
            dq[i] += scale * ds[t2] * k[i];
            dk[i] += scale * ds[t2] * q[i];
            dv[i] += p[t2] * dy[i];
          }
        }
      }
    }
  }
}

// The last row (t = T-1) of attention_forward above, operation for operation, with key/value
// head h / (NH/NKV) read from the cache: so decoding the newest position gives the bits of the
// full forward's last row (of repeat_kv_forward then attention_forward when NKV < NH).
void attention_decode(float* out, float* scratch, const float* q, const float* kv, int64_t T,
                      int64_t NH, int64_t NKV, int64_t hs) {
  STRATA_CHECK(T >= 1 && NKV > 0 && NH % NKV == 0 && hs > 0);
  const int64_t rep = NH / NKV, ld = 2 * NKV * hs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int64_t h = 0; h < NH; h++) {
    const float* qh = q + h * hs;
    const float* k0 = kv + (h / rep) * hs;        // key of position t at k0 + t*ld
    const float* v0 = kv + (NKV + h / rep) * hs;  // value of position t at v0 + t*ld
    float* row = scratch + h * T;
    float max = -INFINITY;
    for (int64_t t = 0; t < T; t++) {
      const float* k = k0 + t * ld;
      float s = 0.0f;
      for (int64_t i = 0; i < hs; i++) s += qh[i] * k[i];
      row[t] = s * scale;
      if (row[t] > max) max = row[t];
    }
    float sum = 0.0f;
    for (int64_t t = 0; t < T; t++) {
      row[t] = std::exp(row[t] - max);
      sum += row[t];
    }
    for (int64_t t = 0; t < T; t++) row[t] /= sum;
    float* o = out + h * hs;
    for (int64_t i = 0; i < hs; i++) {
      float s = 0.0f;
      for (int64_t t = 0; t < T; t++) s += row[t] * v0[t * ld + i];
      o[i] = s;
    }
  }
}

// ---- softmax cross-entropy ----------------------------------------------------------------------

void softmax_cross_entropy_forward(float* losses, float* probs, const float* logits,
                                   const int32_t* targets, int64_t N, int64_t V) {
  for (int64_t i = 0; i < N; i++) {
    const float* x = logits + i * V;
    const bool counted = targets[i] != kIgnoreTarget;  // Note [Ignored targets]
    STRATA_CHECK(!counted || (targets[i] >= 0 && targets[i] < V));
    double max = -INFINITY;
    for (int64_t v = 0; v < V; v++) max = std::max(max, static_cast<double>(x[v]));
    double sum = 0.0;
    for (int64_t v = 0; v < V; v++) sum += std::exp(x[v] - max);
    for (int64_t v = 0; v < V; v++)
      probs[i * V + v] = static_cast<float>(std::exp(x[v] - max) / sum);
    // -log(softmax[target]) = log(sum) - (x[target] - max), without rounding the probability.
    losses[i] = counted ? static_cast<float>(std::log(sum) - (x[targets[i]] - max)) : 0.0f;
  }
}

void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                    float dloss, int64_t N, int64_t V) {
  for (int64_t i = 0; i < N; i++) {
    if (targets[i] == kIgnoreTarget) continue;
    for (int64_t v = 0; v < V; v++) {
      float indicator = v == targets[i] ? 1.0f : 0.0f;
      dlogits[i * V + v] += (probs[i * V + v] - indicator) * dloss;
    }
  }
}

// ---- embedding ----------------------------------------------------------------------------------

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C) {
  for (int64_t b = 0; b < B; b++) {
    for (int64_t t = 0; t < T; t++) {
      const int64_t tok = tokens[b * T + t];
      for (int64_t c = 0; c < C; c++) {
        out[(b * T + t) * C + c] =
            wpe != nullptr ? wte[tok * C + c] + wpe[t * C + c] : wte[tok * C + c];
      }
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C) {
  for (int64_t b = 0; b < B; b++) {
    for (int64_t t = 0; t < T; t++) {
      const int64_t tok = tokens[b * T + t];
      for (int64_t c = 0; c < C; c++) {
        dwte[tok * C + c] += dout[(b * T + t) * C + c];
        if (dwpe != nullptr) dwpe[t * C + c] += dout[(b * T + t) * C + c];
      }
    }
  }
}

// ---- elementwise --------------------------------------------------------------------------------

void add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void scaled_add(float* y, const float* x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

void scaled_copy_2d(float* y, int64_t ldy, const float* x, int64_t ldx, int64_t rows, int64_t cols,
                    float alpha, bool accumulate) {
  for (int64_t i = 0; i < rows; i++) {
    for (int64_t j = 0; j < cols; j++) {
      const float v = alpha * x[i * ldx + j];
      y[i * ldy + j] = accumulate ? y[i * ldy + j] + v : v;
    }
  }
}

// The mask spelled out from its definition: the top 24 bits of the hash of stream + i.
void dropout_apply(float* out, const float* inp, int64_t n, const DropoutMask& m, bool accumulate) {
  for (int64_t i = 0; i < n; i++) {
    const uint64_t h = splitmix64(m.stream + static_cast<uint64_t>(i));
    const bool keep = (h >> 40) >= m.threshold;
    const float v = keep ? inp[i] * m.scale : 0.0f;
    out[i] = accumulate ? out[i] + v : v;
  }
}

void convert_f32_to_bf16(bf16_t* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = f32_to_bf16(inp[i]);
}

void convert_bf16_to_f32(float* out, const bf16_t* inp, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = bf16_to_f32(inp[i]);
}

void sum_squares(double* out, const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) sum += static_cast<double>(x[i]) * x[i];
  out[0] = sum;
}

// ---- Llama: RMSNorm, RoPE, SwiGLU, repeat_kv (formulas in backend.h) ---------------------------

// The squares summed in f32 in index order; 1 / sqrt, each rounded (as PyTorch's CPU rsqrt).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps) {
  for (int64_t i = 0; i < N; i++) {
    const float* x = inp + i * C;
    float sum = 0.0f;
    for (int64_t c = 0; c < C; c++) sum += x[c] * x[c];
    float s = 1.0f / std::sqrt(sum / static_cast<float>(C) + eps);
    for (int64_t c = 0; c < C; c++) out[i * C + c] = x[c] * s * weight[c];
    rstd[i] = s;
  }
}

// With norm = x * rstd, y = norm * w, rstd = (mean(x^2) + eps)^(-1/2):
//   d rstd / d x_j = -rstd^3 x_j / C, so with dnorm = dout * w,
//   dx = rstd * (dnorm - norm * mean(dnorm * norm)),   dw += norm * dout
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; i++) {
    const float* x = inp + i * C;
    const float* dy = dout + i * C;
    float dot = 0.0f;
    for (int64_t c = 0; c < C; c++) dot += (weight[c] * dy[c]) * (x[c] * rstd[i]);
    const float dot_mean = dot / static_cast<float>(C);
    for (int64_t c = 0; c < C; c++) {
      float norm = x[c] * rstd[i];
      float dnorm = weight[c] * dy[c];
      dinp[i * C + c] += rstd[i] * (dnorm - norm * dot_mean);
      dweight[c] += norm * dy[c];
    }
  }
}

namespace {

// RoPE on every token: each pair (x1, x2) = (src[h*hs + i], src[h*hs + i + hs/2]) of the first
// n_rot_heads heads is rotated by (c, s) = rope[t, i], the other floats pass through. Forward:
// dst = the rotation [[c, -s], [s, c]] of src. Backward: dst += its transpose [[c, s], [-s, c]]
// of src.
void rope_apply(float* dst, const float* src, const float* rope, int64_t B, int64_t T, int64_t row,
                int64_t n_rot_heads, int64_t hs, bool backward) {
  STRATA_CHECK(hs > 0 && hs % 2 == 0 && n_rot_heads >= 0 && n_rot_heads * hs <= row);
  const int64_t half = hs / 2;
  for (int64_t b = 0; b < B; b++) {
    for (int64_t t = 0; t < T; t++) {
      const float* x = src + (b * T + t) * row;
      float* y = dst + (b * T + t) * row;
      for (int64_t h = 0; h < n_rot_heads; h++) {
        for (int64_t i = 0; i < half; i++) {
          float c = rope[(t * half + i) * 2];
          float s = rope[(t * half + i) * 2 + 1];
          float x1 = x[h * hs + i];
          float x2 = x[h * hs + i + half];
          if (!backward) {
            y[h * hs + i] = x1 * c - x2 * s;
            y[h * hs + i + half] = x2 * c + x1 * s;
          } else {
            y[h * hs + i] += x1 * c + x2 * s;
            y[h * hs + i + half] += x2 * c - x1 * s;
          }
        }
      }
      for (int64_t j = n_rot_heads * hs; j < row; j++) y[j] = backward ? y[j] + x[j] : x[j];
    }
  }
}

}  // namespace

void rope_forward(float* out, const float* inp, const float* rope, int64_t B, int64_t T,
                  int64_t row, int64_t n_rot_heads, int64_t hs) {
  rope_apply(out, inp, rope, B, T, row, n_rot_heads, hs, false);
}

void rope_backward(float* dinp, const float* dout, const float* rope, int64_t B, int64_t T,
                   int64_t row, int64_t n_rot_heads, int64_t hs) {
  rope_apply(dinp, dout, rope, B, T, row, n_rot_heads, hs, true);
}

// silu(g) = g / (1 + exp(-g)); silu'(g) = sig * (1 + g * (1 - sig)), sig = 1 / (1 + exp(-g)),
// as PyTorch's silu backward. std::exp(float) is glibc's expf.
void swiglu_forward(float* out, const float* gu, int64_t N, int64_t F) {
  for (int64_t i = 0; i < N; i++) {
    for (int64_t j = 0; j < F; j++) {
      float g = gu[i * 2 * F + j];
      float u = gu[i * 2 * F + F + j];
      float silu = g / (1.0f + std::exp(-g));
      out[i * F + j] = silu * u;
    }
  }
}

void swiglu_backward(float* dgu, const float* gu, const float* dout, int64_t N, int64_t F) {
  for (int64_t i = 0; i < N; i++) {
    for (int64_t j = 0; j < F; j++) {
      float g = gu[i * 2 * F + j];
      float u = gu[i * 2 * F + F + j];
      float e = std::exp(-g);
      float sig = 1.0f / (1.0f + e);
      float silu = g / (1.0f + e);
      float dsilu = sig * (1.0f + g * (1.0f - sig));
      float dy = dout[i * F + j];
      dgu[i * 2 * F + j] += dy * u * dsilu;
      dgu[i * 2 * F + F + j] += dy * silu;
    }
  }
}

// Query head h reads kv head h / (NH/NKV).
void repeat_kv_forward(float* out, const float* inp, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                       int64_t hs) {
  STRATA_CHECK(NKV > 0 && NH % NKV == 0);
  const int64_t rep = NH / NKV;
  const int64_t in_row = (NH + 2 * NKV) * hs, out_row = 3 * NH * hs;
  for (int64_t bt = 0; bt < B * T; bt++) {
    const float* x = inp + bt * in_row;
    float* y = out + bt * out_row;
    for (int64_t h = 0; h < NH; h++) {
      const int64_t kv = h / rep;
      for (int64_t i = 0; i < hs; i++) {
        y[h * hs + i] = x[h * hs + i];
        y[(NH + h) * hs + i] = x[(NH + kv) * hs + i];
        y[(2 * NH + h) * hs + i] = x[(NH + NKV + kv) * hs + i];
      }
    }
  }
}

// dk[kv] += (0 + dk'[kv*rep] + dk'[kv*rep + 1] + ...), in repeat order; the same for v.
void repeat_kv_backward(float* dinp, const float* dout, int64_t B, int64_t T, int64_t NH,
                        int64_t NKV, int64_t hs) {
  STRATA_CHECK(NKV > 0 && NH % NKV == 0);
  const int64_t rep = NH / NKV;
  const int64_t in_row = (NH + 2 * NKV) * hs, out_row = 3 * NH * hs;
  for (int64_t bt = 0; bt < B * T; bt++) {
    const float* dy = dout + bt * out_row;
    float* dx = dinp + bt * in_row;
    for (int64_t i = 0; i < NH * hs; i++) dx[i] += dy[i];
    for (int64_t kv = 0; kv < NKV; kv++) {
      for (int64_t i = 0; i < hs; i++) {
        float dk = 0.0f, dv = 0.0f;
        for (int64_t r = 0; r < rep; r++) {
          dk += dy[(NH + kv * rep + r) * hs + i];
          dv += dy[(2 * NH + kv * rep + r) * hs + i];
        }
        dx[(NH + kv) * hs + i] += dk;
        dx[(NH + NKV + kv) * hs + i] += dv;
      }
    }
  }
}

}  // namespace strata::cpu::ref
