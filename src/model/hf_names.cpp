#include "model/hf_names.h"

#include <algorithm>

#include "core/check.h"

namespace strata {

HfTensor hf_tensor(const ParamLayout& layout, int64_t index) {
  const ParamTensor& t = layout.tensors.at(static_cast<size_t>(index));
  HfTensor h;
  h.name = t.hf_name;
  h.shape = t.shape.dims;
  h.transposed = t.hf_transposed;
  if (h.transposed) std::swap(h.shape[0], h.shape[1]);
  return h;
}

namespace {
// out (cols, rows) <- in (rows, cols)
void transpose(const float* in, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
}
}  // namespace

void to_hf_layout(const ParamTensor& t, const float* strata, float* hf) {
  if (t.hf_transposed) {
    transpose(strata, hf, t.shape.dims[0], t.shape.dims[1]);
  } else {
    std::copy(strata, strata + t.numel(), hf);
  }
}

void from_hf_layout(const ParamTensor& t, const float* hf, float* strata) {
  if (t.hf_transposed) {
    transpose(hf, strata, t.shape.dims[1], t.shape.dims[0]);
  } else {
    std::copy(hf, hf + t.numel(), strata);
  }
}

}  // namespace strata
