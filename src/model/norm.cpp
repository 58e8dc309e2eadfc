#include "model/norm.h"

namespace strata {

void norm_forward(Device& dev, Stream& s, const NormSpec& spec, float* out, float* mean,
                  float* rstd, const float* inp, const float* weight, const float* bias, int64_t N,
                  int64_t C) {
  switch (spec.arch) {
    case ModelArch::gpt2:
      dev.layernorm_forward(s, out, mean, rstd, inp, weight, bias, N, C);
      return;
    case ModelArch::llama:
      dev.rmsnorm_forward(s, out, rstd, inp, weight, N, C, spec.eps);
      return;
  }
}

void norm_backward(Device& dev, Stream& s, const NormSpec& spec, float* dinp, float* dweight,
                   float* dbias, const float* dout, const float* inp, const float* weight,
                   const float* mean, const float* rstd, int64_t N, int64_t C) {
  switch (spec.arch) {
    case ModelArch::gpt2:
      dev.layernorm_backward(s, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
      return;
    case ModelArch::llama:
      dev.rmsnorm_backward(s, dinp, dweight, dout, inp, weight, rstd, N, C);
      return;
  }
}

}  // namespace strata
