#include "model/init.h"

#include <cmath>
#include <cstring>

#include "core/rng.h"

namespace strata {

void init_param_slab(const ParamLayout& layout, int64_t slab_index, float* slab_params,
                     uint64_t seed) {
  const Slab& slab = layout.slabs[static_cast<size_t>(slab_index)];
  std::memset(slab_params, 0, static_cast<size_t>(slab.numel) * sizeof(float));
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(layout.config.n_layer));
  for (int64_t i = slab.first_tensor; i < slab.first_tensor + slab.tensor_count; i++) {
    const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
    float* p = slab_params + (t.offset - slab.offset);
    const int64_t n = t.numel();
    switch (t.init) {
      case ParamInit::zeros:
        break;
      case ParamInit::ones:
        for (int64_t j = 0; j < n; j++) p[j] = 1.0f;
        break;
      case ParamInit::normal:
      case ParamInit::residual_normal: {
        const double std = t.init == ParamInit::residual_normal ? residual_std : 0.02;
        Rng rng(derive_seed(seed, static_cast<uint64_t>(i)));
        for (int64_t j = 0; j < n; j++) p[j] = static_cast<float>(std * rng.next_normal());
        break;
      }
    }
  }
}

void init_params(const ParamLayout& layout, float* params, uint64_t seed) {
  for (size_t s = 0; s < layout.slabs.size(); s++) {
    init_param_slab(layout, static_cast<int64_t>(s), params + layout.slabs[s].offset, seed);
  }
}

}  // namespace strata
