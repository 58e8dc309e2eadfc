#include "model/init.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/rng.h"

namespace strata {

void init_param_tensor(const ParamLayout& layout, int64_t tensor, float* p, uint64_t seed) {
  const ParamTensor& t = layout.tensors[static_cast<size_t>(tensor)];
  const int64_t n = t.numel();
  switch (t.init) {
    case ParamInit::zeros:
      std::fill_n(p, n, 0.0f);
      break;
    case ParamInit::ones:
      std::fill_n(p, n, 1.0f);
      break;
    case ParamInit::normal:
    case ParamInit::residual_normal: {
      const double residual_std =
          0.02 / std::sqrt(2.0 * static_cast<double>(layout.config.n_layer));
      const double std = t.init == ParamInit::residual_normal ? residual_std : 0.02;
      Rng rng(derive_seed(seed, t.seed_index));
      for (int64_t j = 0; j < n; j++) p[j] = static_cast<float>(std * rng.next_normal());
      break;
    }
    case ParamInit::kaiming_uniform: {  // Note [LoRA]: U(-1/sqrt(in), 1/sqrt(in))
      const double bound = 1.0 / std::sqrt(static_cast<double>(t.shape.dims[1]));
      Rng rng(derive_seed(seed, t.seed_index));
      for (int64_t j = 0; j < n; j++) {
        p[j] = static_cast<float>(bound * (2.0 * rng.next_unit() - 1.0));
      }
      break;
    }
  }
}

void init_param_slab(const ParamLayout& layout, int64_t slab_index, float* slab_params,
                     uint64_t seed) {
  const Slab& slab = layout.slabs[static_cast<size_t>(slab_index)];
  std::memset(slab_params, 0, static_cast<size_t>(slab.numel) * sizeof(float));
  for (int64_t i = slab.first_tensor; i < slab.first_tensor + slab.tensor_count; i++) {
    const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
    init_param_tensor(layout, i, slab_params + (t.offset - slab.offset), seed);
  }
}

void init_params(const ParamLayout& layout, float* params, uint64_t seed) {
  for (size_t s = 0; s < layout.slabs.size(); s++) {
    init_param_slab(layout, static_cast<int64_t>(s), params + layout.slabs[s].offset, seed);
  }
}

}  // namespace strata
